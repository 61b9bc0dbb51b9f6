#include "tollgate/admin/console_assets.hpp"

namespace tollgate::admin {

std::optional<ConsoleAsset> console_asset(std::string_view path) {
  if (path == "/" || path == "/ui" || path == "/ui/") path = "/ui/index.html";
  for (const ConsoleAsset& a : console_assets())
    if (a.path == path) return a;
  return std::nullopt;
}

}  // namespace tollgate::admin
