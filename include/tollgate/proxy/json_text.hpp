// A JSON object written straight into a string (keys and add_literal values are the code's own
// text, written as they are; every other string is escaped), for the bodies the gateway writes on its request
// path (a 429's problem details, its own 4xx/5xx): one buffer, no tree of nodes. Strings are
// escaped as JSON requires, and bytes that are not UTF-8 become U+FFFD (a detail can quote what a
// client sent), so the output always parses. Numbers: integers as they are, others in their
// shortest round-trip form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate::proxy {

// Appends `s` to `out` as a JSON string literal, quotes included.
void append_json_string(std::string& out, std::string_view s);

// Adds the string member `key` (the code's own name, written as it is) = `value` at the end of a
// finished JSON object (its last byte '}'), e.g. a problem body made elsewhere. Anything else is
// left as it is.
void add_string_member(std::string& object, std::string_view key, std::string_view value);

class JsonObject {
 public:
  explicit JsonObject(std::size_t reserve = 256) { out_.reserve(reserve); out_.push_back('{'); }
  JsonObject& add(std::string_view key, std::string_view value) {
    append_json_string(key_(key), value);
    return *this;
  }
  // A value the code spells itself (a type URI, a title): written as it is, not escaped.
  JsonObject& add_literal(std::string_view key, std::string_view literal) {
    std::string& o = key_(key);
    o.push_back('"');
    o.append(literal);
    o.push_back('"');
    return *this;
  }
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add_string_array(std::string_view key, std::string_view only_item) {
    std::string& o = key_(key);
    o.push_back('[');
    append_json_string(o, only_item);
    o.push_back(']');
    return *this;
  }
  std::string done() && {
    out_.push_back('}');
    return std::move(out_);
  }

 private:
  // Keys are the code's own names: written as they are.
  std::string& key_(std::string_view key) {
    if (out_.size() > 1) out_.push_back(',');
    out_.push_back('"');
    out_.append(key);
    out_.append("\":", 2);
    return out_;
  }
  std::string out_;
};

}  // namespace tollgate::proxy
