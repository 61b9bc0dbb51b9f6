#!/usr/bin/env python3
"""Exactly N keep-alive GET requests over C connections, spread round-robin over several paths
(ab sends one URL only). For bench/instructions.sh's 100-bucket cases: the gateway is what is
measured, this client is not. Fails (exit 1) unless every request got a 2xx on the connection it
started on.

  keepalive_load.py N CONC HOST:PORT PATH [PATH...]
"""
import http.client
import sys
import threading


def main():
    n, conc, target, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    host, port = target.rsplit(":", 1)
    errors, counts = [], [0] * conc

    def client(k):
        share = n // conc + (1 if k < n % conc else 0)
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        try:
            for i in range(share):
                path = paths[(k + i * conc) % len(paths)]
                conn.request("GET", path)
                sock = conn.sock
                r = conn.getresponse()
                r.read()
                if not 200 <= r.status < 300:
                    errors.append(f"{path}: {r.status}")
                    return
                if conn.sock is None or conn.sock is not sock:
                    errors.append(f"{path}: the connection was not kept alive")
                    return
                counts[k] += 1
        except Exception as e:  # noqa: BLE001 - any failure fails the run
            errors.append(f"connection {k}: {e}")
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or sum(counts) != n:
        print(f"keepalive_load: {sum(counts)} of {n} requests answered with 2xx; {errors[:5]}", file=sys.stderr)
        sys.exit(1)
    print(f"keepalive_load: {n} requests, {conc} connections, {len(paths)} paths: all 2xx")


if __name__ == "__main__":
    main()
