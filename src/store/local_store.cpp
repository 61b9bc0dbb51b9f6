#include "tollgate/store/local_store.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tollgate/store/key_schema.hpp"
#include "tollgate/store/metric_series.hpp"

namespace tollgate::store {

namespace {
// A bucket that is full at `now` holds exactly what a missing state holds.
bool rested(const limiter::BucketState& st, const limiter::Shape& shape, Micros now) {
  limiter::BucketState probe = st;
  limiter::resync(probe, shape, now);
  return probe.next_free == now && probe.stored >= shape.max_permits;
}

// What a request asks of its bucket and its channel bucket: their permits, and the permits each
// keeps for the classes above the request's (its shares of their bursts).
limiter::PairAsk ask_of(const AcquireRequest& req, const limiter::Shape& a, const limiter::Shape& b) {
  return {req.permits, req.parent_permits, req.reserve_share * a.max_permits, req.parent_reserve_share * b.max_permits};
}

// Locks one or two shards in index order (no deadlock between a pair and its reverse).
class ShardLocks {
 public:
  ShardLocks(std::mutex& a, std::mutex* b, bool a_first) {
    if (b == nullptr || b == &a) {
      first_ = std::unique_lock(a);
      return;
    }
    first_ = std::unique_lock(a_first ? a : *b);
    second_ = std::unique_lock(a_first ? *b : a);
  }

 private:
  std::unique_lock<std::mutex> first_, second_;
};
}  // namespace

LocalStore::LocalStore(const limiter::Clock& clock, std::size_t max_client_keys, std::size_t max_abandoned)
    // At least 8 entries per shard (a configured cap is at least 512).
    : clock_(clock), per_shard_cap_(std::max<std::size_t>(8, max_client_keys / kShards)), max_abandoned_(max_abandoned) {}

void LocalStore::sweep(Shard& shard, Micros now) {
  std::erase_if(shard.map, [now](const auto& kv) {
    const Entry& e = kv.second;
    if (e.kind == Kind::meter) {  // full at `now`: what a missing meter holds
      MeterSlot m = *e.meter;
      m.update(now);
      return m.full();
    }
    if (e.kind == Kind::bucket)
      return rested(e.state, e.shape, now) && (!e.adaptive || limiter::adaptive_rested(*e.adaptive, now)) &&
             e.pause_floor <= now;
    limiter::WindowState w = e.window;  // a shared quota counter with nothing left to remember
    limiter::roll(w, e.window_params, now);
    return w.current == 0 && w.previous == 0;
  });
  shard.sweep_at = std::max<std::size_t>(1024, shard.map.size() * 2);
}

LocalStore::Entry& LocalStore::slot(Shard& shard, const Key& key, bool client, Kind kind, bool& created) {
  created = false;
  if (!client) {
    auto it = shard.map.find(key);
    if (it != shard.map.end()) return it->second;
    created = true;
    Entry& e = shard.map.emplace(std::string(key.name), Entry{}).first->second;
    e.kind = kind;
    return e;
  }
  auto it = shard.clients.find(key);
  if (it != shard.clients.end()) {
    shard.lru.splice(shard.lru.begin(), shard.lru, it->second);  // most recently used
    return it->second->entry;
  }
  created = true;  // the table is trimmed to its cap after the decision (see trim)
  shard.lru.push_front(ClientSlot{std::string(key.name), Entry{}});
  shard.clients.emplace(shard.lru.front().key, shard.lru.begin());
  Entry& e = shard.lru.front().entry;
  e.kind = kind;
  return e;
}

void LocalStore::trim(Shard& shard) const {
  while (shard.clients.size() > per_shard_cap_) {  // oldest idle first
    shard.clients.erase(shard.lru.back().key);
    shard.lru.pop_back();
  }
}

LocalStore::Entry& LocalStore::bucket_entry(Shard& shard, const BucketRef& ref, const Key& key, bool client,
                                             Micros now) {
  bool created = false;
  Entry& e = slot(shard, key, client, Kind::bucket, created);
  if (created) {
    e.params = ref.params;
    e.shape = limiter::shape_of(ref.params);
    e.state = limiter::full_state(e.shape, now);
  } else if (!(e.params == ref.params)) {
    // The rule changed (a new rate): keep the state, rescaled as Guava's setRate does.
    const limiter::Shape shape = limiter::shape_of(ref.params);
    limiter::rescale(e.state, e.shape, shape, now);
    e.params = ref.params;
    e.shape = shape;
  }
  return e;
}

LocalStore::Entry& LocalStore::own_bucket(Shard& shard, const AcquireRequest& req, const Key& key, Micros now,
                                           StoreDecision& out) {
  if (req.adaptive == limiter::Adaptive::off) return bucket_entry(shard, req.bucket, key, req.per_client_bucket, now);
  // The rate is worked out before the bucket is touched, so that it is rescaled once, straight
  // from the shape it was in to the one of this rate (as the Redis script does).
  Entry* found = find(shard, key, false);
  limiter::AdaptiveState st = found && found->adaptive ? *found->adaptive : new_adaptive();
  out.windows = limiter::WindowPhase::share(st.windows, now, req.window_pair);
  if (req.admitted > 0) limiter::note_admitted(st, now, req.admitted, req.admitted_before);
  if (!req.again) limiter::note_demand(st, now, req.permits, req.caller);
  if (req.advert) limiter::note_advert(st.adv, now, *req.advert);
  out.effective_rate = limiter::effective_rate(st, req.bucket.params.rate, now);
  // The supplier's advertised allowance paces the bucket, and closes it until a window with room.
  const Micros from = found && found->state.next_free > now ? found->state.next_free : now;
  const limiter::AdvertLimit al = limiter::advert_limit(st.adv, now, req.permits, from);
  if (al.rate > 0 && al.rate < out.effective_rate) out.effective_rate = al.rate;
  BucketRef ref = req.bucket;
  if (req.adaptive == limiter::Adaptive::on) {
    ref.params = limiter::effective_params(req.bucket.params, out.effective_rate);
    if (st.pause_until > now) out.paused_us = st.pause_until - now;
    out.last_cut_us = st.last_signal > 0 ? st.last_signal : 0;
  }
  Entry& e = bucket_entry(shard, ref, key, false, now);
  if (req.adaptive == limiter::Adaptive::on && al.closed_until > now) {
    e.state.stored = 0;
    if (e.state.next_free < al.closed_until) e.state.next_free = al.closed_until;
  }
  if (!e.adaptive) e.adaptive = std::make_unique<limiter::AdaptiveState>();
  *e.adaptive = st;
  return e;
}

LocalStore::Entry* LocalStore::find(Shard& shard, const Key& key, bool client) {
  if (!client) {
    auto it = shard.map.find(key);
    return it == shard.map.end() ? nullptr : &it->second;
  }
  auto it = shard.clients.find(key);
  return it == shard.clients.end() ? nullptr : &it->second->entry;
}

LocalStore::Entry& LocalStore::meter_entry(Shard& shard, const Key& key, const MeterRef& ref, Micros now) {
  bool created = false;
  Entry& e = slot(shard, key, false, Kind::meter, created);
  if (created || !e.meter || e.meter->two_rate != ref.two_rate) {
    e.kind = Kind::meter;
    e.meter = std::make_unique<MeterSlot>();
    e.meter->two_rate = ref.two_rate;
    e.meter->sr = ref.sr;
    e.meter->tr = ref.tr;
    e.meter->srs = limiter::srtcm_full_state(ref.sr, now);
    e.meter->trs = limiter::trtcm_full_state(ref.tr, now);
    return e;
  }
  MeterSlot& m = *e.meter;
  if (m.two_rate ? !(m.tr == ref.tr) : !(m.sr == ref.sr)) {  // only its own kind's numbers count
    // The rule changed: the counts are updated at the old rates, then kept within the new sizes
    // (as acquire.lua does).
    m.update(now);
    m.resize(ref);
  }
  return e;
}

void LocalStore::MeterSlot::update(Micros now) {
  if (two_rate) limiter::trtcm_update(trs, tr, now);
  else limiter::srtcm_update(srs, sr, now);
}

bool LocalStore::MeterSlot::full() const {
  return two_rate ? trs.tc >= tr.cbs && trs.tp >= tr.pbs : srs.tc >= sr.cbs && srs.te >= sr.ebs;
}

void LocalStore::MeterSlot::resize(const MeterRef& ref) {
  if (two_rate) {
    trs.tc = std::min(trs.tc, ref.tr.cbs);
    trs.tp = std::min(trs.tp, ref.tr.pbs);
  } else {
    srs.tc = std::min(srs.tc, ref.sr.cbs);
    srs.te = std::min(srs.te, ref.sr.ebs);
  }
  sr = ref.sr;
  tr = ref.tr;
}

limiter::TcmDecision LocalStore::MeterSlot::mark(const MeterRef& ref, double permits, Micros timeout_us, Micros now) {
  if (two_rate)
    return ref.wait_green ? limiter::trtcm_wait_green_aware(trs, tr, permits, ref.pre, timeout_us, now)
                          : limiter::trtcm_mark_aware(trs, tr, permits, ref.pre, now);
  return ref.wait_green ? limiter::srtcm_wait_green_aware(srs, sr, permits, ref.pre, timeout_us, now)
                        : limiter::srtcm_mark_aware(srs, sr, permits, ref.pre, now);
}

LocalStore::Entry& LocalStore::window_entry(const QuotaRef& q, const Key& key, Micros now) {
  bool created = false;
  Entry& e = slot(shard_of(key), key, !q.shared, Kind::window, created);
  if (created || !(e.window_params == q.params)) {
    // New, or the quota was edited: counts of another period or limit start over.
    e.window = {limiter::window_index(now, q.params.period_us), 0, 0};
    e.window_params = q.params;
  }
  return e;
}

namespace {
// Locks every shard a request touches, in index order (no allocation: at most every shard).
class MultiLock {
 public:
  MultiLock() = default;
  MultiLock(const MultiLock&) = delete;
  MultiLock& operator=(const MultiLock&) = delete;
  ~MultiLock() {
    for (std::size_t i = held_; i > 0; --i) mus_[i - 1]->unlock();
  }
  void add(std::size_t index) { idx_[n_++] = index; }
  bool full() const { return n_ == idx_.size(); }
  // Calls f(shard) for every locked shard.
  template <class Shards, class F>
  void each(Shards& shards, F f) const {
    for (std::size_t i = 0; i < held_; ++i) f(shards[locked_[i]]);
  }
  void all() {
    for (std::size_t i = 0; i < idx_.size(); ++i) idx_[i] = i;
    n_ = idx_.size();
  }
  template <class Shards>
  void lock(Shards& shards) {
    std::sort(idx_.begin(), idx_.begin() + n_);
    const auto end = std::unique(idx_.begin(), idx_.begin() + n_);
    for (auto it = idx_.begin(); it != end; ++it) {
      mus_[held_] = &shards[*it].mu;
      mus_[held_]->lock();
      locked_[held_] = *it;
      ++held_;
    }
  }

 private:
  // Left uninitialised (1.5 KiB a decision otherwise): only the first n_ and held_ are ever read.
  std::array<std::size_t, 64> idx_;
  std::array<std::mutex*, 64> mus_;
  std::array<std::size_t, 64> locked_;
  std::size_t n_ = 0, held_ = 0;
};

constexpr std::int64_t kQuotaPermits = 1;  // a quota counts requests, whatever their cost
}  // namespace

// The general path: buckets, quotas and maxShare decided on copies; charged only if all admit.
StoreDecision LocalStore::decide_all(const AcquireRequest& req) {
  StoreDecision out;
  // Every key hashed once, for its shard's lock and for its lookup.
  const Key bucket_key = req.use_bucket ? Key(req.bucket.name) : Key();
  const Key parent_key = req.parent ? Key(req.parent->name) : Key();
  const Key share_key = req.share ? Key(req.share->key) : Key();
  const std::string meter_key = req.meter ? meter_name(req.meter->name) : std::string();
  const Key meter_hashed = req.meter ? Key(meter_key) : Key();
  thread_local std::vector<Key> quota_keys;  // scratch space reused by this thread's decisions
  quota_keys.clear();
  for (const QuotaRef& q : req.quotas) quota_keys.emplace_back(q.key);
  MultiLock locks;
  if (req.use_bucket) locks.add(shard_index(bucket_key));
  if (req.parent) locks.add(shard_index(parent_key));
  for (const Key& k : quota_keys) {
    if (locks.full()) break;
    locks.add(shard_index(k));
  }
  if (req.share && !locks.full()) locks.add(shard_index(share_key));
  if (req.meter && !locks.full()) locks.add(shard_index(meter_hashed));
  if (locks.full()) locks.all();  // more checks than shards: take them all
  locks.lock(shards_);
  // The clock is read under the locks, so that each bucket sees time only move forward: a `now`
  // read before another thread's decision on the same bucket would make a stored permit wait.
  const Micros now = clock_.now_us();
  // Swept before any entry is looked up, so that a sweep never removes an entry this request
  // already holds a reference to.
  locks.each(shards_, [now](Shard& sh) {
    if (sh.map.size() >= sh.sweep_at) sweep(sh, now);
  });
  // Client tables go back to their cap when the decision is done (still under the locks): entries
  // this request holds references to are never evicted while it uses them.
  struct TrimOnExit {
    const LocalStore& store;
    MultiLock& locks;
    std::array<Shard, kShards>& shards;
    ~TrimOnExit() {
      locks.each(shards, [this](Shard& sh) { store.trim(sh); });
    }
  } trim_on_exit{*this, locks, shards_};

  // Each check decided on copies, in turn; charged only if all admit.
  Pending p;
  p.a = req.use_bucket ? &own_bucket(shard_of(bucket_key), req, bucket_key, now, out) : nullptr;
  p.b = req.parent ? &bucket_entry(shard_of(parent_key), *req.parent, parent_key, false, now) : nullptr;
  decide_buckets(req, p, now, out);
  p.me = req.meter ? &meter_entry(shard_of(meter_hashed), meter_hashed, *req.meter, now) : nullptr;
  if (p.me) decide_meter(req, p, now, out);
  decide_quotas(req, quota_keys, p, now, out);
  if (req.share && p.bd.granted && p.bd.wait_us > 0) decide_share(req, share_key, p, now, out);
  out.decision = p.bd;
  if (p.all) charge(req, p, now, out);
  else refuse(p, now, out);
  out.parent_bound = out.bound == Bound::parent;
  return out;
}

// Buckets: the rule's own (if any) and its channel's, on copies of their states.
void LocalStore::decide_buckets(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out) const {
  Entry* a = p.a;
  Entry* b = p.b;
  p.sa = a ? a->state : limiter::BucketState{};
  p.sb = b ? b->state : limiter::BucketState{};
  p.bd.granted = true;
  if (a && b) {
    const limiter::PairDecision pd =
        limiter::try_acquire_pair(p.sa, a->shape, p.sb, b->shape, a->params.mode, ask_of(req, a->shape, b->shape),
                                  req.timeout_us, now);
    p.bd = pd.combined;
    out.bound = pd.bound == 1 ? Bound::parent : Bound::bucket;
    out.max_permits = pd.bound == 1 ? b->shape.max_permits : a->shape.max_permits;
    out.reservation = {pd.first.next_free, pd.first.cost_us, pd.first.spent,
                       pd.second.next_free, pd.second.cost_us, pd.second.spent};
  } else if (a || b) {
    Entry* e = a ? a : b;
    p.bd = a ? limiter::try_acquire(p.sa, e->shape, e->params.mode, req.permits, req.timeout_us, now,
                                    req.reserve_share * e->shape.max_permits)
             : limiter::try_acquire(p.sb, e->shape, e->params.mode, req.parent_permits, req.timeout_us, now,
                                    req.parent_reserve_share * e->shape.max_permits);
    out.bound = a ? Bound::bucket : Bound::parent;
    out.max_permits = e->shape.max_permits;
    if (a) out.reservation = {p.bd.next_free, p.bd.cost_us, p.bd.spent, 0, 0, 0};
    else out.reservation = {0, 0, 0, p.bd.next_free, p.bd.cost_us, p.bd.spent};
  }
  p.all = p.bd.granted;
  p.retry = p.bd.granted ? 0 : p.bd.retry_after_us;
}

// A meter in place of the rule's bucket, decided on a copy of its counts.
void LocalStore::decide_meter(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out) const {
  const MeterRef& ref = *req.meter;
  p.ms = *p.me->meter;  // meter_entry made its numbers the request's
  p.ms.update(now);
  p.meter_left = p.ms.committed();
  const limiter::TcmDecision md = p.ms.mark(ref, req.permits, req.timeout_us, now);
  out.color = md.color;
  out.meter_committed = md.tc_left;
  out.meter_excess = md.te_or_tp_left;
  const double committed = ref.two_rate ? ref.tr.cbs : ref.sr.cbs;
  if (md.color == limiter::Color::red) {
    if (p.later(md.retry_after_us)) {
      out.bound = Bound::bucket;
      out.max_permits = committed;
      p.retry = md.retry_after_us;
    }
    p.all = false;
  } else if (p.bd.granted) {
    if (!p.b || md.wait_us >= p.bd.wait_us) {  // the meter's green is the later: it decides
      out.bound = Bound::bucket;
      out.max_permits = committed;
    }
    p.bd.wait_us = std::max(p.bd.wait_us, md.wait_us);
    p.bd.remaining = p.b ? std::min(p.bd.remaining, md.tc_left) : md.tc_left;
  }
}

// Quotas: never hold; each admits now or names when it would.
void LocalStore::decide_quotas(const AcquireRequest& req, const std::vector<Key>& keys, Pending& p, Micros now,
                               StoreDecision& out) {
  // Scratch space reused by this thread's decisions.
  thread_local std::vector<limiter::WindowState> rolled;
  thread_local std::vector<Entry*> windows;
  rolled.clear();
  windows.clear();
  p.rolled = &rolled;
  p.windows = &windows;
  out.quotas.reserve(req.quotas.size());
  for (std::size_t i = 0; i < req.quotas.size(); ++i) {
    Entry& e = window_entry(req.quotas[i], keys[i], now);
    limiter::WindowState w = e.window;
    limiter::roll(w, req.quotas[i].params, now);
    const limiter::WindowDecision d = limiter::window_check(w, req.quotas[i].params, kQuotaPermits, now);
    if (!d.admitted) {
      if (p.later(d.retry_after_us)) {
        out.bound = Bound::quota;
        out.bound_quota = i;
        p.retry = d.retry_after_us;
      }
      p.all = false;
    }
    out.quotas.push_back(d);
    rolled.push_back(w);
    windows.push_back(&e);
  }
}

// maxShare: a caller with max_held grants still waiting gets only an immediate permit.
void LocalStore::decide_share(const AcquireRequest& req, const Key& key, Pending& p, Micros now, StoreDecision& out) {
  bool created = false;
  p.share = &slot(shard_of(key), key, true, Kind::share, created);
  std::erase_if(p.share->holds, [now](Micros r) { return r <= now; });
  if (static_cast<std::int64_t>(p.share->holds.size()) >= req.share->max_held) {
    const Micros free_at = *std::min_element(p.share->holds.begin(), p.share->holds.end()) - now;
    if (p.later(free_at)) {
      out.bound = Bound::share;
      p.retry = free_at;
    }
    p.all = false;
  }
}

void LocalStore::refuse(const Pending& p, Micros now, StoreDecision& out) {
  out.decision.granted = false;
  out.decision.wait_us = 0;
  out.decision.retry_after_us = p.retry;
  if (p.bd.granted) {  // the buckets would have granted: report their state as it stays
    double remaining = std::numeric_limits<double>::infinity();
    for (Entry* e : {p.a, p.b}) {
      if (e == nullptr) continue;
      limiter::BucketState st = e->state;
      limiter::resync(st, e->shape, now);
      remaining = std::min(remaining, st.stored);
    }
    out.decision.remaining = (p.a || p.b) ? remaining : 0;
  }
  if (p.me) out.decision.remaining = p.b ? std::min(out.decision.remaining, p.meter_left) : p.meter_left;
  out.reservation = {};
}

void LocalStore::charge(const AcquireRequest& req, Pending& p, Micros now, StoreDecision& out) {
  if (p.a) p.a->state = p.sa;
  if (p.b) p.b->state = p.sb;
  if (p.a && p.a->adaptive && req.adaptive != limiter::Adaptive::off) {
    limiter::advert_granted(p.a->adaptive->adv, req.permits, now + p.bd.wait_us);
    out.grant_seq = p.a->adaptive->adv.granted;
  }
  if (p.me) *p.me->meter = p.ms;
  for (std::size_t i = 0; i < p.windows->size(); ++i) {
    (*p.windows)[i]->window = (*p.rolled)[i];
    (*p.windows)[i]->window.current += kQuotaPermits;
  }
  if (p.share) {
    out.reservation.share_release = now + p.bd.wait_us;
    p.share->holds.push_back(out.reservation.share_release);
  }
}

StoreDecision LocalStore::decide(const AcquireRequest& req) {
  if (!simple(req)) return decide_all(req);
  StoreDecision out;
  const Key ka(req.bucket.name);
  const std::size_t ia = shard_index(ka);
  if (!req.parent) {
    Shard& shard = shards_[ia];
    std::lock_guard lock(shard.mu);
    const Micros now = clock_.now_us();  // under the lock: see decide_all
    if (shard.map.size() >= shard.sweep_at) sweep(shard, now);
    Entry& e = bucket_entry(shard, req.bucket, ka, false, now);
    out.decision = limiter::try_acquire(e.state, e.shape, e.params.mode, req.permits, req.timeout_us, now,
                                        req.reserve_share * e.shape.max_permits);
    out.max_permits = e.shape.max_permits;
    out.reservation = {out.decision.next_free, out.decision.cost_us, out.decision.spent, 0, 0, 0};
    return out;
  }
  const Key kb(req.parent->name);
  const std::size_t ib = shard_index(kb);
  ShardLocks locks(shards_[ia].mu, &shards_[ib].mu, ia < ib);
  const Micros now = clock_.now_us();
  // Sweep first: a sweep while creating the second entry could remove the first (rested) one.
  for (Shard* sh : {&shards_[ia], &shards_[ib]})
    if (sh->map.size() >= sh->sweep_at) sweep(*sh, now);
  Entry& a = bucket_entry(shards_[ia], req.bucket, ka, false, now);
  Entry& b = bucket_entry(shards_[ib], *req.parent, kb, false, now);
  const limiter::PairDecision pd =
      limiter::try_acquire_pair(a.state, a.shape, b.state, b.shape, a.params.mode, ask_of(req, a.shape, b.shape),
                                req.timeout_us, now);
  out.decision = pd.combined;
  out.parent_bound = pd.bound == 1;
  out.max_permits = pd.bound == 1 ? b.shape.max_permits : a.shape.max_permits;
  out.reservation = {pd.first.next_free, pd.first.cost_us, pd.first.spent,
                     pd.second.next_free, pd.second.cost_us, pd.second.spent};
  return out;
}

bool LocalStore::give_back(const AcquireRequest& req, const Reservation& r) { return give_back_slots(req, r).any(); }

RefundResult LocalStore::give_back_slots(const AcquireRequest& req, const Reservation& r) {
  RefundResult out;
  {
    const Key ka(req.bucket.name);
    const Key kb(req.parent ? std::string_view(req.parent->name) : std::string_view());
    const std::size_t ia = shard_index(ka);
    const std::size_t ib = req.parent ? shard_index(kb) : ia;
    ShardLocks locks(shards_[ia].mu, req.parent ? &shards_[ib].mu : nullptr, ia < ib);
    const Micros now = clock_.now_us();
    // Found as they are now: a refund never reconciles parameters (the request's may be older).
    auto abandon = [&](Entry* e, const limiter::Slot& slot, std::uint32_t& returned) {
      if (e == nullptr) return;  // no state: a full, rested bucket holds no reservation
      if (!e->abandoned) e->abandoned = std::make_unique<std::vector<limiter::Slot>>();
      const limiter::GiveBack g = limiter::abandon(e->state, e->shape, *e->abandoned, slot, now, max_abandoned_);
      if (e->abandoned->empty()) e->abandoned.reset();
      returned = g.returned;
      out.remembered = out.remembered || g.remembered;
    };
    if (req.use_bucket) {
      Entry* e = find(shards_[ia], ka, req.per_client_bucket);
      abandon(e, {r.release, r.cost, r.spent}, out.bucket);
      // A pause applied to the bucket: what comes back never reopens it early (as kRefund).
      if (e && e->pause_floor > now && e->state.next_free < e->pause_floor && out.bucket > 0) {
        e->state.next_free = e->pause_floor;
        e->state.stored = 0;
      }
    }
    if (req.parent)
      abandon(find(shards_[ib], kb, false), {r.parent_release, r.parent_cost, r.parent_spent}, out.parent);
  }
  if (req.share && r.share_release != 0) {
    // The caller left: its waiting grant no longer counts against its share (bucket locks released
    // first, so that shards are only ever taken in index order).
    const Key ks(req.share->key);
    Shard& shard = shard_of(ks);
    std::lock_guard lock(shard.mu);
    if (Entry* e = find(shard, ks, true)) {
      if (auto h = std::find(e->holds.begin(), e->holds.end(), r.share_release); h != e->holds.end()) e->holds.erase(h);
    }
  }
  return out;
}

RefundResult LocalStore::give_back_unused(const AcquireRequest& req) {
  RefundResult out;
  const Key ka(req.bucket.name);
  const Key kb(req.parent ? std::string_view(req.parent->name) : std::string_view());
  const std::size_t ia = shard_index(ka);
  const std::size_t ib = req.parent ? shard_index(kb) : ia;
  ShardLocks locks(shards_[ia].mu, req.parent ? &shards_[ib].mu : nullptr, ia < ib);
  const Micros now = clock_.now_us();
  auto restore = [&](Entry* e, double permits, std::uint32_t& returned) {
    if (e == nullptr) return;  // no state: a full, rested bucket
    if (e->pause_floor > now) return;  // an adaptive pause: never reopened early (as restore.lua)
    returned = limiter::restore(e->state, e->shape, permits) ? 1 : 0;
  };
  if (req.use_bucket) restore(find(shards_[ia], ka, req.per_client_bucket), req.permits, out.bucket);
  if (req.parent) restore(find(shards_[ib], kb, false), req.parent_permits, out.parent);
  return out;
}

boost::asio::awaitable<RefundResult> LocalStore::return_unused(AcquireRequest req) { co_return give_back_unused(req); }

boost::asio::awaitable<StoreDecision> LocalStore::try_acquire(AcquireRequest req) { co_return decide(req); }

boost::asio::awaitable<AdaptOutcome> LocalStore::throttled(AcquireRequest req, Micros pause_us, Micros jitter_us) {
  co_return adapt(req, pause_us, jitter_us);
}

AdaptOutcome LocalStore::adapt(const AcquireRequest& req, Micros pause_us, Micros jitter_us) {
  AdaptOutcome out;
  if (req.adaptive == limiter::Adaptive::off || !req.use_bucket || req.per_client_bucket) {
    out.error = "not an adaptive bucket";
    return out;
  }
  const Key key(req.bucket.name);
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mu);
  const Micros now = clock_.now_us();
  Entry* e = find(shard, key, false);
  if (e == nullptr) e = &bucket_entry(shard, req.bucket, key, false, now);  // a full, rested bucket
  if (!e->adaptive) e->adaptive = std::make_unique<limiter::AdaptiveState>(new_adaptive());
  limiter::AdaptiveState& st = *e->adaptive;
  const double configured = req.bucket.params.rate;
  if (req.admitted > 0) limiter::note_admitted(st, now, req.admitted, req.admitted_before);  // this gateway's, told with the throttle
  out.result = limiter::on_throttle(st, configured, now, pause_us, jitter_us, req.caller);
  out.effective_rate = limiter::effective_rate(st, configured, now);
  // Where the supplier's windows start: this gateway's pair into the fleet's arc, after the signal
  // was read by the seconds it came in (as adapt.lua).
  out.windows = limiter::WindowPhase::share(st.windows, now, req.window_pair);
  if (req.adaptive == limiter::Adaptive::on && out.result.cut) {
    // A cut restarts the bucket's schedule at the new rate, empty, when its pause ends (or now):
    // the slots granted before it, at the old rate, are void (their holders ask again when they
    // wake: the session's hold), and nothing piles up during a pause. A refund of a void slot
    // never reopens the bucket before the restart (pause_floor).
    const Micros restart = st.pause_until > now ? st.pause_until : now;
    e->abandoned.reset();  // the slots of left callers, remembered for refunds: void too
    e->state.stored = 0;
    e->state.next_free = restart;
    e->pause_floor = restart;
  }
  out.pause_left_us = st.pause_until > now ? st.pause_until - now : 0;
  out.last_cut_us = st.last_signal > 0 ? st.last_signal : 0;
  out.ok = true;
  return out;
}

boost::asio::awaitable<bool> LocalStore::refund(AcquireRequest req, Reservation r) { co_return give_back(req, r); }

boost::asio::awaitable<RefundResult> LocalStore::refund_slots(AcquireRequest req, Reservation r) {
  co_return give_back_slots(req, r);
}

bool LocalStore::reset_adaptive(const BucketRef& ref, std::string_view) {
  const Key key(ref.name);
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mu);
  Entry* e = find(shard, key, false);
  if (e != nullptr && e->adaptive) {
    e->adaptive.reset();
    e->pause_floor = 0;
  }
  return true;
}

std::optional<BucketSnapshot> LocalStore::inspect(const BucketRef& ref, std::string_view) {
  const std::string_view bucket = ref.name;
  const BucketParams& params = ref.params;
  BucketSnapshot snap;
  snap.now = clock_.now_us();
  const Key key(bucket);
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(key);
  if (it == shard.map.end()) {
    const limiter::Shape shape = limiter::shape_of(params);
    snap.stored = shape.max_permits;
    snap.next_free = snap.now;
    snap.max_permits = shape.max_permits;
    return snap;
  }
  limiter::BucketState st = it->second.state;
  limiter::resync(st, it->second.shape, snap.now);
  snap.stored = st.stored;
  snap.next_free = st.next_free;
  snap.max_permits = it->second.shape.max_permits;
  snap.tracked = true;
  if (const auto& ab = it->second.abandoned) {  // released ones are only forgotten on the next give-back
    snap.abandoned = static_cast<std::size_t>(
        std::count_if(ab->begin(), ab->end(), [now = snap.now](const limiter::Slot& x) { return x.release > now; }));
  }
  return snap;
}

std::size_t LocalStore::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.size() + s.clients.size();
  }
  return n;
}

void LocalStore::publish_metrics(prometheus::Registry& registry) const {
  gauge(registry, "tollgate_client_keys", "Per-client entries held in process (keyed buckets, quota counters, maxShare).")
      .Set(static_cast<double>(client_keys()));
  gauge(registry, "tollgate_client_keys_max",
        "Cap on per-client entries (limits.max_client_keys); the oldest idle go first.")
      .Set(static_cast<double>(max_client_keys()));
}

std::size_t LocalStore::client_keys() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.clients.size();
  }
  return n;
}

}  // namespace tollgate::store
