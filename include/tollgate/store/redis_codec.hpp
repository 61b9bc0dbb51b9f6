// The Redis store's script codec: what a request sends to the Lua scripts (numkeys, KEYS and ARGV:
// everything that follows "EVALSHA <sha>") and what their replies mean. Plain strings in,
// decisions out: no hiredis, no Asio, so that it is unit-tested without a server and the replay
// tests can drive the scripts through a plain connection.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/limiter/token_bucket.hpp"
#include "tollgate/store/decision.hpp"

namespace tollgate::store {

// The general acquire script: any request (bucket, channel bucket, quotas, maxShare).
// now_override: "" in production (the script reads Redis TIME); a Unix time in microseconds only
// for replays and tests.
std::vector<std::string> acquire_call(const AcquireRequest& req, const std::string& prefix,
                                      std::string_view now_override);
// Its reply as a decision (nullopt when malformed). `quotas`: how many the request carried;
// `adaptive`: the request was (req.adaptive != off), and the reply ends with its rate and pause;
// `metered`: it had a meter, and the reply ends with its colour and counts.
std::optional<StoreDecision> parse_acquire_reply(const std::vector<std::string>& items, std::size_t quotas,
                                                bool adaptive = false, bool metered = false);

// The adaptive bucket's throttle signal; now_override as above.
std::vector<std::string> adapt_call(const AcquireRequest& req, const std::string& prefix, Micros pause_us,
                                    Micros jitter_us, std::string_view now_override = {});
// Its reply; `now` is the caller's clock, for the pause's end (the script's is Redis's).
std::optional<AdaptOutcome> parse_adapt_reply(const std::vector<std::string>& items, Micros now);

// The refund script; now_override as above, max_abandoned as in LocalStore.
std::vector<std::string> refund_call(const AcquireRequest& req, const std::string& prefix, const Reservation& res,
                                     std::string_view now_override = {},
                                     std::size_t max_abandoned = limiter::kMaxAbandoned);
// The refund script's reply as a result (nullopt when malformed).
std::optional<RefundResult> parse_refund_reply(const AcquireRequest& req, const std::vector<std::string>& items);

// The restore script (return_unused): the request's bucket keys, now, its permits per bucket.
std::vector<std::string> restore_call(const AcquireRequest& req, const std::string& prefix,
                                      std::string_view now_override = {});
std::optional<RefundResult> parse_restore_reply(const AcquireRequest& req, const std::vector<std::string>& items);

// The lean acquire script: the common case, a request with its one bucket and nothing else (no
// channel bucket, quotas or maxShare). It sends the bucket's shape compactly (interval and size;
// the warm-up numbers only with warm-up) and gets a short reply, for the same decision as the
// general script's, double for double. One call carries a batch of entries for the same bucket, in
// arrival order at one instant: decisions (of one shape and mode: batchable) and refunds of
// reservations such requests were granted (the refund script's work for that bucket, in its place).
bool lean_request(const AcquireRequest& req);
// Whether `b` can go in one lean call with `a`: the same key and the same shape and mode.
bool batchable(const AcquireRequest& a, const AcquireRequest& b);

// One entry of a lean batch: a decision for `req`, or, with `give_back` set, the refund of a
// reservation `req` was granted (its caller left while held).
struct LeanEntry {
  const AcquireRequest* req = nullptr;
  const Reservation* give_back = nullptr;
};
// The answer to an entry: `decision` for a decision, `refund` for a refund.
struct LeanAnswer {
  StoreDecision decision;
  RefundResult refund;
};

// A batch's arguments after "EVALSHA <sha>" (non-empty; the decisions batchable with each other,
// every entry for the same key); max_abandoned as in LocalStore, sent only with refunds.
std::vector<std::string> lean_batch_call(const std::vector<LeanEntry>& entries, const std::string& prefix,
                                         std::string_view now_override,
                                         std::size_t max_abandoned = limiter::kMaxAbandoned);
// The same batch as the whole command the connection sends: EVALSHA <sha> <lean_batch_call's
// arguments with no now_override>, in Redis's wire format (byte for byte resp_command of those),
// written into `out` in one pass. `key` is the bucket's (redis_key of the first entry's request);
// `prefix` makes its abandoned set's key when there are refunds. The shape's text is formatted once
// per thread and shape, not per call.
void lean_batch_command(std::string& out, std::string_view sha, std::string_view key, const std::string& prefix,
                        const std::vector<LeanEntry>& entries);

// One element of a script's array reply as hiredis reads it: Lua numbers arrive as integers,
// everything else (fractions, 2^53 written as text) as text. `text` views the reply's buffer.
struct ReplyItem {
  bool is_integer = false;
  long long integer = 0;
  std::string_view text;
};
// A batch's reply as one answer per entry, in order (nullopt when malformed).
std::optional<std::vector<LeanAnswer>> parse_lean_batch_reply(const std::vector<LeanEntry>& entries,
                                                              const ReplyItem* items, std::size_t count);

// Decisions only (what most tests send): the same calls for a list of requests.
std::vector<std::string> lean_batch_call(const std::vector<const AcquireRequest*>& reqs, const std::string& prefix,
                                         std::string_view now_override);
std::vector<std::string> lean_acquire_call(const AcquireRequest& req, const std::string& prefix,
                                           std::string_view now_override);
std::optional<std::vector<StoreDecision>> parse_lean_batch_reply(const std::vector<const AcquireRequest*>& reqs,
                                                                 const std::vector<std::string>& items);
std::optional<StoreDecision> parse_lean_acquire_reply(const AcquireRequest& req,
                                                      const std::vector<std::string>& items);

// A command as Redis reads it off the wire (RESP: an array of bulk strings), byte for byte what
// hiredis's redisFormatCommandArgv writes: the connection sends it as it is, in one copy.
std::string resp_command(const std::vector<std::string>& args);

// An EVALSHA command in wire format made into the same call with EVAL and the script's body (what
// is sent again after NOSCRIPT); nullopt when `wire` is not an EVALSHA command.
std::optional<std::string> evalsha_as_eval(std::string_view wire, std::string_view body);

const char* acquire_script();
const char* lean_acquire_script();
const char* refund_script();
const char* restore_script();
const char* adapt_script();

}  // namespace tollgate::store
