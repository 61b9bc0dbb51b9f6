// The Lua scripts the Redis store runs, composed from the files in src/store/lua (one per script,
// or per fragment that two scripts share), which cmake/embed_lua.cmake builds into the binary
// without their documentation headers; each file says what it takes and returns, and how to load
// it by hand with redis-cli --eval. The bucket arithmetic is docs/design.md's, line for line, in
// the same operation order as src/limiter/token_bucket.cpp, so that both stores compute the same
// doubles and truncate them the same way (tests/integration/redis_store_test.cpp replays one
// sequence against both). Numbers cross the wire as %.17g strings or as the shortest text of the
// same double (std::to_chars), both of which Lua's tonumber reads back exactly; Redis writes a Lua
// number handed to redis.call as %.17g.
#pragma once

#include <string>

namespace tollgate::store {

namespace lua {

// Each file's text as Redis is sent it, NUL-terminated, named after the file: generated, constant
// data (so the scripts below can be composed during any translation unit's static initialisation).
extern const char adaptive_lib[];  // the adaptive rate's functions: a fragment, not a script
extern const char acquire[];       // the general acquire script's body
extern const char acquire_lean[];
extern const char refund[];
extern const char restore[];
extern const char adapt[];  // a throttle signal's body
extern const char inspect[];
extern const char scan_count[];
extern const char shared_token[];
extern const char last_cut[];  // an adaptive bucket's last cut, for a held request

}  // namespace lua

namespace scripts {

// The adaptive rate (src/limiter/adaptive_rate.cpp, the same operations in the same order) is one
// fragment, sent at the start of the two scripts that use it, kAcquire and kAdapt, so that both
// read and write the bucket's adaptive hash the same way.

// One request's checks, all-or-nothing: up to two buckets, window quotas, maxShare, an adaptive
// rate. Every request the lean script does not take.
inline const std::string kAcquire = std::string(lua::adaptive_lib) + lua::acquire;

// The common case, lean: one bucket, no channel bucket, no quotas, no maxShare, not adaptive, for
// one decision or a batch of them on the same bucket (the decisions that arrived while the previous
// call for the bucket was in flight), and the refunds of such requests. A script of its own, flat,
// so that the call most requests make pays only for what it runs (fewer arguments, one HMGET, at
// most one write: about half the Redis instructions of kAcquire, docs/BENCHMARKS.md). The same
// arithmetic as kAcquire on the same hash (fields s, n, m, c), so that every script reads what
// another wrote. A script runs atomically, so a batch decides exactly as separate calls at that
// instant would.
inline constexpr const char* kAcquireLean = lua::acquire_lean;

// A departed caller gives its reservation back (limiter::abandon), in each bucket of its request.
inline constexpr const char* kRefund = lua::refund;

// A granted request that reached no upstream gives its permits back (limiter::restore).
inline constexpr const char* kRestore = lua::restore;

// A throttle signal for an adaptive bucket (limiter::on_throttle), at Redis time, so that every
// gateway of the fleet cuts and pauses the same bucket once per episode.
inline const std::string kAdapt = std::string(lua::adaptive_lib) + lua::adapt;

// The admin API's read of buckets, no writes.
inline constexpr const char* kInspect = lua::inspect;

// One step of counting the keys that match a pattern.
inline constexpr const char* kScanCount = lua::scan_count;

// A fleet's shared credential: one token and the lease to fetch the next (proxy/upstream_auth).
inline constexpr const char* kSharedToken = lua::shared_token;

// An adaptive bucket's last cut (BucketStore::last_cut).
inline constexpr const char* kLastCut = lua::last_cut;

}  // namespace scripts

}  // namespace tollgate::store
