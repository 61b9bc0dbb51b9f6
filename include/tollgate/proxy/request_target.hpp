// The request target, checked and normalised before anything is decided on it: the path a rule
// matches must be the path the upstream acts on, or a client could spell a limited path in a way
// the upstream reads as the same resource and the rule does not (a limit bypass).
// No Asio, no Beast: a pure function over the target's bytes.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::proxy {

enum class TargetError {
  none,
  not_origin_form,    // does not start with '/' (absolute-form, authority-form, asterisk-form)
  fragment,           // a '#': a fragment is never sent (RFC 9110 4.2.4), the request is malformed
  bad_escape,         // '%' not followed by two hex digits
  encoded_separator,  // %2F or %5C in the path, or a raw '\': a separator some upstreams decode
  control,            // a control character, space or non-ASCII byte in the target
  encoded_control,    // %00-%1F or %7F in the path: some upstreams cut the path at a decoded NUL
  edge_space,         // %20 beginning or ending a path segment: some upstreams trim it
};
const char* target_error_detail(TargetError e);

// RFC 3986 6.2.2 normalisation of the path, as forwarded: percent-encoded unreserved characters
// decoded, other escapes upper-cased, dot segments removed, runs of '/' merged. `match` is what
// routes and rules see: the normalised path without ';' segment parameters, normalised again,
// then without the trailing '.'s of each segment (a segment left empty is dropped, like '//') and
// without a trailing '/': `/search;x`, `/search/` and `/search.` are limited as `/search`.
// The views point into the raw target or into the struct's own storage: the struct must outlive
// them and not be moved.
struct RequestTarget {
  TargetError error = TargetError::none;
  std::string_view path;   // normalised path
  std::string_view query;  // from the '?' on (empty without a query), never changed
  std::string_view match;  // path for routes and rules
  bool rewritten = false;  // `path` differs from what the client sent: forward path + query

  RequestTarget() = default;
  RequestTarget(const RequestTarget&) = delete;
  RequestTarget& operator=(const RequestTarget&) = delete;

  std::string path_storage;
  std::string match_storage;
};

// Fills `out` from the raw request target. Allocates only when the path needs a change.
void parse_target(std::string_view raw, RequestTarget& out);

// The target for the upstream: its base path ("" or "/v2", no trailing '/'), then `target` (the
// normalised path and query) without `strip` (the route's prefix, when the route strips it). What
// follows the base always starts with '/': "/v2" + "/a?q" is "/v2/a?q"; stripping "/sup" from
// "/sup?q" leaves "/?q".
std::string upstream_target(std::string_view base, std::string_view strip, std::string_view target);

}  // namespace tollgate::proxy
