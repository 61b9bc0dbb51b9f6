// The Redis store's Lua files (src/store/lua: one per script, or per fragment that scripts share),
// built into the binary by cmake/embed_lua.cmake, each as the text Redis is sent: without the
// file's documentation header (that file says how it is recognised). src/store/redis_scripts.hpp
// composes the scripts from them.
#pragma once

#include <span>
#include <string_view>

namespace tollgate::store::lua {

struct LuaFile {
  std::string_view name;  // "acquire_lean.lua"
  std::string_view text;  // as embedded
};

// Every embedded file (generated), in the order CMakeLists.txt lists them.
std::span<const LuaFile> files();

}  // namespace tollgate::store::lua
