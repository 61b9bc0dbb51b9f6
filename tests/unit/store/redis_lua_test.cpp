// The Redis store's Lua files as built into the binary: each embedded text is its file in the
// source tree (src/store/lua) without the documentation header, by the rule cmake/embed_lua.cmake
// applies, and the scripts the store sends are composed of them. Fails on a stale build, on a file
// the build does not embed, and on embedded text that did not come from the files.
#include "tollgate/store/redis_lua.hpp"
#include "tollgate/store/redis_codec.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

namespace tollgate::store {
namespace {

const std::filesystem::path kLuaDir = std::filesystem::path(TOLLGATE_SOURCE_DIR) / "src/store/lua";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << p;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// cmake/embed_lua.cmake's rule: a file whose first line starts with "-- doc:" loses every line
// from the top down to the first that does not start with "--"; any other file is kept whole.
std::string without_doc_header(std::string text) {
  if (!text.starts_with("-- doc:")) return text;
  std::size_t at = 0;
  while (text.compare(at, 2, "--") == 0) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string::npos) break;  // a last line without its newline is not a header line
    at = end + 1;
  }
  return text.substr(at);
}

std::string embedded(std::string_view name) {
  for (const lua::LuaFile& f : lua::files())
    if (f.name == name) return std::string(f.text);
  ADD_FAILURE() << name << " is not embedded";
  return {};
}

std::string source(const std::string& name) { return without_doc_header(read_file(kLuaDir / name)); }

// Equal, or where the texts part (rather than two whole scripts in the failure message).
testing::AssertionResult same_text(std::string_view got, std::string_view want) {
  if (got == want) return testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return testing::AssertionFailure() << "the texts differ from byte " << i << " (" << got.size() << " bytes against "
                                     << want.size() << "): \"" << got.substr(i, 40) << "\" against \""
                                     << want.substr(i, 40) << "\"";
}

TEST(RedisLua, TheHeaderRule) {
  EXPECT_EQ(without_doc_header("-- doc: x\n-- y\n--\n\nlocal a = 1\n-- kept\n"), "\nlocal a = 1\n-- kept\n");
  EXPECT_EQ(without_doc_header("-- doc: x\nlocal a = 1\n"), "local a = 1\n");
  EXPECT_EQ(without_doc_header("-- a comment of the script\nlocal a = 1\n"), "-- a comment of the script\nlocal a = 1\n");
  EXPECT_EQ(without_doc_header("\n-- doc: not at the top\n"), "\n-- doc: not at the top\n");
  EXPECT_EQ(without_doc_header("-- doc: x\n-- no newline"), "-- no newline");
}

TEST(RedisLua, EveryFileIsEmbeddedAsItIsInTheSourceTree) {
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::directory_iterator(kLuaDir))
    if (e.path().extension() == ".lua") on_disk.insert(e.path().filename().string());
  ASSERT_FALSE(on_disk.empty()) << kLuaDir;
  std::set<std::string> built;
  for (const lua::LuaFile& f : lua::files()) {
    built.insert(std::string(f.name));
    // Each file documents itself, and none of that documentation reaches Redis.
    const std::string file = read_file(kLuaDir / std::string(f.name));
    EXPECT_TRUE(file.starts_with("-- doc:")) << f.name << " has no documentation header";
    EXPECT_TRUE(same_text(f.text, without_doc_header(file)))
        << f.name << ": the file is not what the build embedded (a stale build, or a hand edit of the generated code?)";
    EXPECT_EQ(f.text.find("-- doc:"), std::string_view::npos) << f.name;
    EXPECT_EQ(f.text.find('\0'), std::string_view::npos) << f.name;
  }
  EXPECT_EQ(built, on_disk) << "every .lua file in src/store/lua is listed in CMakeLists.txt's TOLLGATE_LUA_FILES";
}

TEST(RedisLua, TheScriptsSentAreComposedOfTheFiles) {
  EXPECT_TRUE(same_text(acquire_script(), source("adaptive_lib.lua") + source("acquire.lua")));
  EXPECT_TRUE(same_text(adapt_script(), source("adaptive_lib.lua") + source("adapt.lua")));
  EXPECT_TRUE(same_text(lean_acquire_script(), source("acquire_lean.lua")));
  EXPECT_TRUE(same_text(refund_script(), source("refund.lua")));
  EXPECT_TRUE(same_text(embedded("inspect.lua"), source("inspect.lua")));
  EXPECT_TRUE(same_text(embedded("scan_count.lua"), source("scan_count.lua")));
  EXPECT_TRUE(same_text(embedded("shared_token.lua"), source("shared_token.lua")));
  EXPECT_TRUE(same_text(embedded("last_cut.lua"), source("last_cut.lua")));
}

}  // namespace
}  // namespace tollgate::store
