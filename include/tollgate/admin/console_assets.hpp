// The operator console's static files (src/admin/console), built into the binary at build time by
// cmake/embed_assets.cmake: nothing to deploy beside the gateway, nothing fetched at run time.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace tollgate::admin {

struct ConsoleAsset {
  std::string_view path;          // "/ui/console.js"
  std::string_view content_type;
  std::string_view body;
};

// Every embedded file (generated).
std::span<const ConsoleAsset> console_assets();

// The file a GET of `path` serves: "/", "/ui" and "/ui/" give the page (index.html).
std::optional<ConsoleAsset> console_asset(std::string_view path);

}  // namespace tollgate::admin
