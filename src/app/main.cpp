// tollgate [--config FILE] [--check [--probe]] | --version | --help
#include <cstring>
#include <iostream>

#include "tollgate/app/gateway.hpp"
#include "tollgate/app/probe.hpp"
#include "tollgate/app/version.hpp"

// jemalloc (when linked): return freed memory to the system within about a second, from a
// background thread, so a burst of held requests does not leave the process big afterwards.
extern "C" {
__attribute__((used)) const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000";
}

int main(int argc, char** argv) {
  std::string path = "conf/gateway.json";
  bool check_only = false;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config") && i + 1 < argc) {
      path = argv[++i];
    } else if (!std::strcmp(argv[i], "--check")) {
      check_only = true;
    } else if (!std::strcmp(argv[i], "--probe")) {
      probe = true;
    } else if (!std::strcmp(argv[i], "--version") || !std::strcmp(argv[i], "-V")) {
      std::cout << tollgate::app::version_text();
      return 0;
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::cout << "tollgate " << tollgate::app::kVersion
                << ": a throttling HTTP gateway in front of rate-limited upstream APIs.\n"
                   "\n"
                   "usage: tollgate [--config FILE] [--check [--probe]]\n"
                   "       tollgate --version | --help\n"
                   "\n"
                   "  --config FILE  the gateway's configuration (default conf/gateway.json)\n"
                   "  --check        validate the configuration and its TLS files, and with limits.source\n"
                   "                 \"mysql\" every row of the tables (read once), then exit (0: valid)\n"
                   "  --probe        with --check: connect to every upstream and report on it (TLS version,\n"
                   "                 cipher, chain, name, expiry, resumption); exit 1 if any fails\n"
                   "  --version, -V  the version, the commit and the libraries it was built with\n"
                   "  --help, -h     this text\n"
                   "\n"
                   "Signals: SIGHUP reloads the rules, the upstreams, routes and DNS names of FILE and the\n"
                   "         TLS files (a field that needs a restart is named in the log); SIGTERM or\n"
                   "         SIGINT drains and exits.\n"
                   "Documentation: README.md and docs/ (configuration.md has every field of FILE).\n";
      return 0;
    } else {
      std::cerr << "tollgate: unknown argument '" << argv[i] << "' (try --help)\n";
      return 2;
    }
  }
  try {
    if (probe && !check_only) {
      std::cerr << "tollgate: --probe goes with --check\n";
      return 2;
    }
    const tollgate::config::GatewayConfig cfg = tollgate::config::load_gateway_config(path);
    tollgate::app::Gateway gw(cfg, check_only);
    if (check_only) {
      std::cout << "tollgate: " << path << " is valid\n";
      return probe ? tollgate::app::probe_upstreams(cfg, std::cout) : 0;
    }
    gw.start();
    return gw.run();
  } catch (const tollgate::config::ConfigError& e) {
    std::cerr << "tollgate: config error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tollgate: cannot start: " << e.what() << "\n";
    return 1;
  }
}
