#!/usr/bin/env python3
"""Helper for bench/instructions.sh: reads callgrind output files and turns pairs of runs
(N_LO and N_HI requests, each a process of its own) into instructions per request.

  instructions.py total FILE                      the file's total Ir (its summary: or totals: line)
  instructions.py report RUNS.tsv OUT.txt HEADER  the table of slopes and ratios (printed and written)
  instructions.py profile LO HI N_LO N_HI [TOP]   top functions by self Ir in HI, each with its slope

Everything is a slope, (Ir(N_HI) - Ir(N_LO)) / (N_HI - N_LO): start-up, the listener's set-up and
shutdown are the same in both runs and cancel, which a single run divided by N would not do.
"""
import collections, json, re, subprocess, sys


def total(path):
    # callgrind writes "summary:" (and "totals:" since 3.x) once per dump; one dump per file here
    # (the process exits once). Prefer summary, fall back to totals.
    found = {}
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                key, value = line.split(":", 1)
                found[key] = int(value.split()[0])
    if "summary" in found:
        return found["summary"]
    if "totals" in found:
        return found["totals"]
    raise SystemExit(f"instructions: {path} has no summary: or totals: line (callgrind did not finish it)")


def calls(path):
    """Calls made to each function (by name), summed over all callers: callgrind's calls= lines.
    Names are compressed as fn=(id) name / cfn=(id) on first and later use; fn and cfn share ids."""
    names, counts, current_cfn = {}, collections.Counter(), None
    pat = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = pat.match(line.rstrip("\n"))
                if not m:
                    continue
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                if line.startswith("cfn="):
                    current_cfn = names.get(m.group(1))
            elif line.startswith("calls=") and current_cfn is not None:
                counts[current_cfn] += int(line[6:].split()[0])
    return counts


def self_costs(path):
    """Self Ir per function from callgrind_annotate --inclusive=no, every function (threshold 100)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                         check=True, capture_output=True, text=True).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = m.group(2).strip()
        if ":" not in name:  # column headers and the like
            continue
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def demangle(names):
    """callgrind leaves names with a GCC clone suffix mangled (coroutine bodies: _Z...Ev.Frame.actor).
    Mangled names never contain '.', so the part before it is demangled and the suffix kept."""
    todo = sorted({n for n in names if re.match(r"^_Z[^.\s]*\.", n)})
    if not todo:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(n.split(".", 1)[0] for n in todo),
                             capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {}
    result = {}
    for n, d in zip(todo, out):
        base, suffix = n.split(".", 1)
        if d == base:  # GCC's coroutine frame names do not demangle: keep the leading nested name
            d = nested_name(base) + "(...)"
        result[n] = f"{d} [{suffix}]"
    return result


def nested_name(mangled):
    """_ZN8tollgate5proxy11ProxyServer4Impl6handleE... -> tollgate::proxy::ProxyServer::Impl::handle"""
    parts, i = [], 3 if mangled.startswith("_ZN") else 2
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while j < len(mangled) and mangled[j].isdigit():
            j += 1
        size = int(mangled[i:j])
        parts.append(mangled[j:j + size])
        i = j + size
    return "::".join(parts) or mangled


def strip_templates(text):
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def head(function):
    """The function's own qualified name: template arguments, parameters and return type removed
    ("std::pair<..> boost::intrusive::bstree_algorithms<..>::insert(..)" -> "boost::intrusive::
    bstree_algorithms::insert"), so that a Beast type in a template argument does not make an Asio
    handler look like Beast."""
    function = re.sub(r"@@?[A-Z_]+[\d.]*", "", function)  # symbol versions: clock_gettime@@GLIBC_2.17
    function = (function.replace("(anonymous namespace)", "{anonymous}").replace("operator()", "operator_call").replace("operator new", "operator_new")
                .replace("operator delete", "operator_delete"))
    h = strip_templates(function.replace("operator<<", "operator_shl").replace("operator<", "operator_lt")
                        .replace("operator>>", "operator_shr").replace("operator->", "operator_arrow")
                        .replace("operator>", "operator_gt"))
    h = h.split("(", 1)[0].strip()
    return h.split()[-1] if h.split() else function


SYSCALLS = {"epoll_wait", "epoll_ctl", "sendmsg", "recvmsg", "__libc_sendmsg", "__libc_recvmsg", "writev",
            "readv", "read", "write", "__libc_read", "__libc_write", "send", "recv", "__libc_send", "__libc_recv",
            "accept4", "ioctl", "__GI___ioctl", "clock_gettime", "__clock_gettime", "__GI___clock_gettime",
            "gettimeofday", "__gettimeofday", "syscall", "__GI___libc_write", "__GI___libc_read", "close",
            "__close", "__libc_close", "getsockopt", "setsockopt", "__GI___writev", "__writev", "eventfd_write",
            "recvfrom", "sendto", "__libc_recvfrom", "__libc_sendto", "timerfd_settime", "accept", "shutdown",
            "connect", "socket", "fcntl", "__fcntl64_nocancel", "fcntl64"}


def area(name):
    """Which part of the stack a function belongs to (name as callgrind_annotate prints it:
    "file:function [object]"). Used to group the per-request slope."""
    m = re.match(r"^(.*?):(.*?)(?:\s\[([^\[\]]*)\])?$", name)
    fname, func, obj = (m.group(1), m.group(2), m.group(3) or "") if m else ("", name, "")
    h = head(func)
    if "ld-linux" in obj or "/elf/" in fname or h.startswith("_dl_") or h in ("do_lookup_x", "check_match"):
        return "dynamic linker (start-up)"
    if "libjemalloc" in obj or h in ("malloc", "free", "calloc", "realloc", "cfree", "_int_malloc", "_int_free",
                                     "sdallocx") or h.startswith(("operator_new", "operator_delete")):
        return "allocation (jemalloc, new/delete)"
    if h in SYSCALLS:
        return "syscall wrappers (libc)"
    if h.startswith(("pthread_mutex", "__pthread_mutex", "pthread_cond", "__lll_lock")):
        return "mutex lock/unlock (pthread)"
    if re.match(r"^_*(mem(cpy|move|set|chr|cmp|rchr)|str(len|chr|cmp|ncmp|casecmp|ncasecmp|rchr|dup))", h) or \
            re.search(r"__(mem|str)\w*_(avx|sse|evex|erms)", h):
        return "libc memory/string (memcpy, memchr...)"
    if re.match(r"^_*(printf|vfprintf|vsnprintf|snprintf|sprintf|__printf_fp|hack_digit|__mpn_|strto[dfl]|"
                r"____strto|round_and_return|str_to_mpn|__vfprintf|__vsnprintf|_IO_str|_itoa|_fitoa)", h):
        return "libc number formatting/parsing (printf %g, strtod)"
    if h.startswith("prometheus::") or "libprometheus" in obj:
        return "Tollgate metrics"  # prometheus-cpp's counters, gauges and histograms
    if h.startswith("tollgate::"):
        if re.match(r"tollgate::(limiter|store|config::(Snapshot|SuffixIndex)|proxy::(Throttle|throttle|"
                    r"(anonymous namespace)::.*throttle))", h) or "Throttle" in h:
            return "Tollgate rate-limit decision (rule lookup, bucket, store)"
        if "Metrics" in h or "metrics" in fname:
            return "Tollgate metrics"
        return "Tollgate proxy (connection, request, response)"
    if h.startswith("boost::beast::http::") or h.startswith("boost::intrusive::"):
        return "Beast HTTP parser/fields (an intrusive set + list)"
    if h.startswith("boost::beast::"):
        return "Beast stream/async_base (Asio glue)"
    if h.startswith(("asio_prefer_fn", "asio_require_fn", "asio_query_fn", "asio_execution_")):
        return "Asio executors (any_io_executor, dispatch)"  # the customisation points behind prefer()
    if h.startswith("boost::asio::"):
        if re.search(r"epoll_reactor|scheduler|timer_queue|socket_ops|descriptor_ops|reactive_socket_service|"
                     r"reactive_descriptor_service|reactor_op|select_interrupter|eventfd|conditionally_enabled",
                     h):
            return "Asio reactor/scheduler (epoll, queues, timers)"
        if re.search(r"awaitable|co_spawn|coro", h):
            return "Asio coroutines (awaitable frames, threads)"
        if re.search(r"execution|any_executor|any_io_executor|executor_function|handler_work|work_dispatcher|"
                     r"executor_op|basic_executor_type|strand|io_context", h):
            return "Asio executors (any_io_executor, dispatch)"
        return "Asio operations/handlers (do_complete, wait_handler)"
    if h.startswith("redis") or h.startswith("sds") or "hiredis" in obj:
        return "hiredis"
    if h.startswith("ngx_"):
        return "nginx"
    if re.match(r"^_?lua[A-Za-z]*_|^lua[A-Z_]|^luai?_", h) or "liblua" in obj:
        return "Lua (Redis scripting)"
    if "redis-check-rdb" in obj or "redis-server" in obj:
        # Debian's binary keeps only exported names (-rdynamic): static functions and Lua's
        # hidden ones (its VM, tables, strings) show as addresses.
        if h.startswith("0x"):
            return "Redis, unnamed (static and hidden functions, e.g. the Lua VM)"
        return "Redis server (named functions)"
    if "libssl.so" in obj:
        return "OpenSSL libssl (handshake, records)"
    if "libcrypto.so" in obj:
        return "OpenSSL libcrypto (EC, ciphers, hashes, X.509)"
    if h.startswith(("std::", "__gnu_cxx::")) or "libstdc++" in obj:
        return "libstdc++"
    if "libc.so" in obj:
        return "libc (other)"
    return "other"


def short(name):
    """"file:function [object]" -> the function's qualified name without template arguments or
    parameters, and the object's file name: readable in a table, still unambiguous enough."""
    f, func, obj = split_name(name)
    text = head(func) if not func.startswith("???") else name
    text = (text.replace("operator_new", "operator new").replace("operator_delete", "operator delete")
            .replace("operator_call", "operator()"))
    if "Frame.actor" in func:
        text += " (coroutine body)"
    return text + (f" [{obj.rsplit('/', 1)[-1]}]" if obj else "")


def split_name(name):
    """"file:function [object]" -> (file, function, object)."""
    m = re.match(r"^(.*?):(.*?)(?:\s\[([^\[\]]*)\])?$", name)
    return (m.group(1), m.group(2), m.group(3) or "") if m else ("", name, "")


def profile(lo, hi, n_lo, n_hi, top=25):
    n = n_hi - n_lo
    c_lo, c_hi = self_costs(lo), self_costs(hi)
    k_lo, k_hi = calls(lo), calls(hi)
    t_lo, t_hi = total(lo), total(hi)
    per_req = (t_hi - t_lo) / n
    dm = demangle({split_name(x)[1] for x in set(c_hi) | set(c_lo)})

    def pretty(name):
        f, func, obj = split_name(name)
        return f"{f}:{dm.get(func, func)}" + (f" [{obj}]" if obj else "")

    rows = sorted(c_hi.items(), key=lambda kv: -kv[1])[:top]
    lines = [f"Self instructions (callgrind_annotate --inclusive=no), top {top} functions at N={n_hi},",
             f"each with its slope between N={n_lo} and N={n_hi}: Ir per request and calls per request.",
             f"Whole process: {t_hi:,} Ir at {n_hi}, {t_lo:,} at {n_lo}: {per_req:,.0f} Ir/request.", "",
             f"{'Ir@' + str(n_hi):>14} {'Ir/req':>7} {'calls/req':>9}  area | function"]
    for name, ir in rows:
        slope = (ir - c_lo.get(name, 0)) / n
        func = split_name(name)[1]
        cr = (k_hi.get(func, 0) - k_lo.get(func, 0)) / n
        lines.append(f"{ir:>14,} {slope:>7,.0f} {cr:>9.2f}  {area(pretty(name))} | {short(pretty(name))}")
    # Every function, grouped: where the per-request slope goes, by area.
    groups = collections.Counter()
    for name in set(c_hi) | set(c_lo):
        groups[area(pretty(name))] += (c_hi.get(name, 0) - c_lo.get(name, 0)) / n
    lines += ["", "Per-request slope by area (all functions):", f"{'Ir/req':>8} {'share':>6}  area"]
    for label, v in groups.most_common():
        if abs(v) >= 0.5:
            lines.append(f"{v:>8,.0f} {100 * v / per_req:>5.1f}%  {label}")
    # The same slope per function, largest first: the top of the per-request cost, not of the file.
    slopes = sorted(((c_hi.get(x, 0) - c_lo.get(x, 0)) / n, x) for x in set(c_hi) | set(c_lo))[::-1][:top]
    lines += ["", f"Top {top} functions by per-request slope (self Ir):", f"{'Ir/req':>7} {'calls/req':>9}  area | function"]
    for v, name in slopes:
        func = split_name(name)[1]
        cr = (k_hi.get(func, 0) - k_lo.get(func, 0)) / n
        lines.append(f"{v:>7,.0f} {cr:>9.2f}  {area(pretty(name))} | {short(pretty(name))}")
    return "\n".join(lines)


SYSCALL_COLUMNS = ["epoll_wait", "recv*/read", "send*/write*", "epoll_ctl", "other", "clock_gettime"]


def syscall_calls(path):
    """Calls into libc's system-call wrappers, by column of SYSCALL_COLUMNS."""
    out = collections.Counter()
    for name, count in calls(path).items():
        h = re.sub(r"@@?[A-Z_]+[\d.]*", "", name)
        if h not in SYSCALLS:
            continue
        if h == "epoll_wait" or h == "epoll_ctl":
            out[h] += count
        elif "clock_gettime" in h or "gettimeofday" in h:
            out["clock_gettime"] += count
        elif re.search(r"recv|read", h):
            out["recv*/read"] += count
        elif re.search(r"send|write", h):
            out["send*/write*"] += count
        else:
            out["other"] += count
    return out


DESC = {
    "N0": "nginx proxy, no limit",
    "N1": "nginx proxy + limit_req that never binds",
    "T0": "Tollgate, no matching rule",
    "T1": "Tollgate, never-binding rule, in-process store",
    "T1A": "T1 with a supplier credential (a static X-Api-Key)",
    "T1H": "T1 to a several-host upstream (three addresses)",
    "T1I": "T1 with the client's own X-Request-Id (kept)",
    "T2": "Tollgate, never-binding rule, Redis store (gateway only)",
    "T2C1": "T2 with one client: every decision its own call",
    "T2B": "T2 over 100 rules, 8 clients round-robin (bench/keepalive_load.py)",
    "RT": "redis-server per Tollgate decision (T2 traffic, gateway not under callgrind)",
    "RT1": "redis-server per Tollgate decision, one client (T2C1 traffic)",
    "RTB": "redis-server per Tollgate decision, 100 buckets (T2B traffic)",
    "T2K": "T2B on a 3-primary Redis Cluster",
    "RK1": "one redis-server's request path per decision, 100 buckets (T2B traffic)",
    "RKB": "a 3-primary cluster's request paths (summed) per decision, 100 buckets (T2B traffic)",
    "RS": "redis-server per EVALSHA of Tollgate's acquire script (redis-benchmark -c 1)",
    "RL": "redis-server per EVALSHA of Tollgate's lean script: one bucket, nothing else (-c 1)",
    "RM": "redis-server per EVALSHA of a minimal token bucket (TIME HMGET HSET PEXPIRE; -c 1)",
    "RP": "redis-server per PING (redis-benchmark -c 1): the fixed cost of one call",
    "T1s": "T1 to an https upstream (verified, keep-alive)",
    "N1s": "N1 to an https upstream (proxy_ssl_verify, session reuse, keepalive 32)",
    "T1sN": "T1s, upstream keepalive_requests 1: a TLS handshake per request",
    "N1sN": "N1s, upstream keepalive_requests 1: a TLS handshake per request",
    "N1s3": "N1s with proxy_ssl_protocols TLSv1.2 TLSv1.3",
    "N1sN3": "N1sN with proxy_ssl_protocols TLSv1.2 TLSv1.3",
}
ORDER = ["N0", "N1", "T0", "T1", "N1s", "N1s3", "T1s", "N1sN", "N1sN3", "T1sN", "T2", "T2C1", "T2B", "T2K", "RT", "RT1", "RTB", "RK1", "RKB", "RS", "RL", "RM", "RP"]


def report(runs_tsv, out_txt, header):
    runs = collections.defaultdict(dict)  # case -> N -> (Ir, file, note)
    for line in open(runs_tsv):
        case, n, ir, path, note = line.rstrip("\n").split("\t")
        runs[case][int(n)] = (int(ir), path, note)
    slope = {}
    lines = [header, "",
             f"{'case':<5} {'Ir/request':>11} {'Ir(lo)':>15} {'Ir(hi)':>15}  what"]
    for case in ORDER + sorted(set(runs) - set(ORDER)):
        if case not in runs or len(runs[case]) != 2:
            continue
        (n_lo, (ir_lo, _, _)), (n_hi, (ir_hi, _, note)) = sorted(runs[case].items())
        slope[case] = (ir_hi - ir_lo) / (n_hi - n_lo)
        lines.append(f"{case:<5} {slope[case]:>11,.0f} {ir_lo:>15,} {ir_hi:>15,}  {DESC.get(case, case)}"
                     + (f" [{note}]" if note else ""))
    lines.append("")
    for a, b in (("T0", "N0"), ("T1", "N1"), ("T2", "T1"), ("T2C1", "T1"), ("T2B", "T1"), ("T1", "T0"), ("N1", "N0"),
                 ("RS", "RM"), ("RL", "RM"), ("RT", "RM"), ("RT1", "RM"), ("RTB", "RM"), ("T2K", "T2B"), ("RKB", "RK1"),
                 ("T1s", "N1s"), ("T1s", "N1s3"), ("T1sN", "N1sN"), ("T1sN", "N1sN3"), ("T1s", "T1"), ("N1s", "N1"),
                 ("T1sN", "T1s"), ("N1sN", "N1s")):
        if a in slope and b in slope:
            lines.append(f"{a}/{b} = {slope[a] / slope[b]:.3f}   ({slope[a] - slope[b]:+,.0f} Ir/request)")
    if "T2" in slope and "RT" in slope:
        lines.append(f"T2 + RT = {slope['T2'] + slope['RT']:,.0f} Ir per request, gateway and Redis together")
    # Callgrind counts user-space instructions only: the kernel's side of each system call is not
    # in Ir/request. So the calls into libc's system-call wrappers are counted too (same slope).
    lines += ["", "Calls per request into libc's system-call wrappers (same slope; the kernel's work behind them",
              "is not in Ir). clock_gettime is a vDSO call, not a system call.", "",
              f"{'case':<5} " + " ".join(f"{c:>13}" for c in SYSCALL_COLUMNS)]
    for case in ORDER + sorted(set(runs) - set(ORDER)):
        if case not in slope:
            continue
        (n_lo, (_, f_lo, _)), (n_hi, (_, f_hi, _)) = sorted(runs[case].items())
        k_lo, k_hi = syscall_calls(f_lo), syscall_calls(f_hi)
        per = [round((k_hi[c] - k_lo[c]) / (n_hi - n_lo), 2) + 0.0 for c in SYSCALL_COLUMNS]  # + 0.0: no "-0.00"
        lines.append(f"{case:<5} " + " ".join(f"{v:>13.2f}" for v in per))
    text = "\n".join(lines) + "\n"
    open(out_txt, "w").write(text)
    # The slopes and notes again, for bench/report.py.
    notes = {c: sorted(runs[c].items())[-1][1][2] for c in slope}
    json.dump({c: {"ir": slope[c], "note": notes[c]} for c in slope},
              open(re.sub(r"\.txt$", "", out_txt) + ".json", "w"), indent=1)
    print(text, end="")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "total":
        print(total(sys.argv[2]))
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "profile":
        print(profile(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                      int(sys.argv[6]) if len(sys.argv) > 6 else 25))
    else:
        raise SystemExit(__doc__)
