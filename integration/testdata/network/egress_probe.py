# egress_probe.py PROBE...: runs each probe from inside a sandbox and
# prints "PROBE verdict" lines, verdict "ok:..." or "err:...". Probes:
#   resolve:NAME           getaddrinfo through the sandbox's resolv.conf
#   https:NAME[@IP]        HTTPS GET with SNI NAME (to IP, or NAME resolved),
#                          trusting /tmp/ca.pem
#   http:NAME[@IP]         HTTP GET with Host NAME
#   keepalive:N1,N2,...@IP HTTP GETs of /keepaliveI with Host NI, one after
#                          another on one kept-alive connection to IP:80
#   pipeline:N1,N2,...@IP  the same, all requests sent before any answer
#   dns:SERVER:NAME[:TYPE] a raw UDP query for NAME sent to SERVER:53
#   dnstcp:SERVER:NAME     the same over TCP
#   dot:SERVER             a TCP connection to SERVER:853 (DNS over TLS)
#   doh:IP:BODY            HTTPS POST of BODY to https://IP/dns-query (no SNI)
#   query:NAME:TYPE        a raw query to the resolver of /etc/resolv.conf
#   tcp:IP:PORT            a TCP connection
#   timeresolve:NAME:N     the median of N resolutions, in ms
#   timeget:NAME@IP:PORT:N the median of N HTTP GETs (new connection each)
import os, random, socket, ssl, struct, sys, time

T = 4


def err(e):
    if isinstance(e, OSError) and e.errno:
        return "err:" + os.strerror(e.errno)
    return "err:" + (type(e).__name__ + ":" + str(e)).replace(" ", "_")[:120]


def resolver():
    for line in open("/etc/resolv.conf"):
        f = line.split()
        if len(f) >= 2 and f[0] == "nameserver":
            return f[1]
    return "127.0.0.1"


def dns_msg(name, qtype):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    return q


def rcode(resp):
    return resp[3] & 0x0F


def udp_query(server, name, qtype=1, timeout=T):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        # connected, so that an ICMP reject fails the receive at once
        s.connect((server, 53))
        s.send(dns_msg(name, qtype))
        resp = s.recv(4096)
        return "ok:rcode=%d" % rcode(resp)
    except Exception as e:
        return err(e)
    finally:
        s.close()


def tcp_query(server, name, qtype=1):
    try:
        s = socket.create_connection((server, 53), timeout=T)
    except Exception as e:
        return err(e)
    try:
        m = dns_msg(name, qtype)
        s.sendall(struct.pack(">H", len(m)) + m)
        n = struct.unpack(">H", s.recv(2))[0]
        resp = s.recv(n)
        return "ok:rcode=%d" % rcode(resp)
    except Exception as e:
        return err(e)
    finally:
        s.close()


def target(spec, port):
    name, _, ip = spec.partition("@")
    if not ip:
        ip = socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    return name, ip


def https(spec):
    try:
        name, ip = target(spec, 443)
        ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
        raw = socket.create_connection((ip, 443), timeout=T)
        s = ctx.wrap_socket(raw, server_hostname=name)
        s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode())
        body = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            body += b
        s.close()
        return "ok:" + body.split(b"\r\n\r\n", 1)[-1].decode().strip().replace(" ", "_")
    except Exception as e:
        return err(e)


def http(spec):
    try:
        name, ip = target(spec, 80)
        s = socket.create_connection((ip, 80), timeout=T)
        s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode())
        resp = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            resp += b
        s.close()
        if not resp:
            return "err:closed"
        status = resp.split(b"\r\n", 1)[0].decode()
        if " 200 " not in status:
            return "err:" + status.replace(" ", "_")
        return "ok:" + resp.split(b"\r\n\r\n", 1)[-1].decode().strip().replace(" ", "_")
    except Exception as e:
        return err(e)


def keepalive(spec, pipeline=False):
    names, _, ip = spec.partition("@")
    try:
        s = socket.create_connection((ip, 80), timeout=T)
        f = s.makefile("rb")
        out = []
        reqs = [("GET /keepalive%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (i, name)).encode()
                for i, name in enumerate(names.split(","))]
        if pipeline:
            s.sendall(b"".join(reqs))
        for i, r in enumerate(reqs):
            if not pipeline:
                s.sendall(r)
            status = f.readline()
            if not status:
                return "err:%d:closed" % i
            length = None
            while True:
                h = f.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode().partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            body = f.read(length) if length is not None else f.read()
            if b" 200 " not in status:
                return "err:%d:%s" % (i, status.decode().strip().replace(" ", "_"))
            out.append(body.decode().strip().replace(" ", "_"))
        s.close()
        return "ok:" + ",".join(out)
    except Exception as e:
        return err(e)


def doh(ip, body):
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        raw = socket.create_connection((ip, 443), timeout=T)
        s = ctx.wrap_socket(raw)  # no server name: a raw IP
        s.sendall(("POST /dns-query HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (ip, len(body), body)).encode())
        r = s.recv(4096)
        s.close()
        return "ok:" + r.split(b"\r\n", 1)[0].decode().replace(" ", "_")
    except Exception as e:
        return err(e)


def probe(p):
    kind, _, rest = p.partition(":")
    if kind == "resolve":
        try:
            return "ok:" + socket.getaddrinfo(rest, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except Exception as e:
            return err(e)
    if kind == "https":
        return https(rest)
    if kind == "http":
        return http(rest)
    if kind in ("keepalive", "pipeline"):
        return keepalive(rest, kind == "pipeline")
    if kind in ("dns", "dnstcp"):
        f = rest.split(":")
        qtype = {"A": 1, "TXT": 16}[f[2]] if len(f) > 2 else 1
        if kind == "dns":  # direct: blocked, and gVisor reports no ICMP for UDP
            return udp_query(f[0], f[1], qtype, timeout=1.5)
        return tcp_query(f[0], f[1], qtype)
    if kind == "query":
        name, _, qt = rest.partition(":")
        return udp_query(resolver(), name, {"A": 1, "TXT": 16, "AAAA": 28}[qt or "A"])
    if kind == "dot":
        try:
            socket.create_connection((rest, 853), timeout=T).close()
            return "ok:connected"
        except Exception as e:
            return err(e)
    if kind == "doh":
        ip, _, body = rest.partition(":")
        return doh(ip, body)
    if kind == "tcp":
        ip, _, port = rest.rpartition(":")
        try:
            socket.create_connection((ip, int(port)), timeout=T).close()
            return "ok:connected"
        except Exception as e:
            return err(e)
    if kind == "timeresolve":
        name, _, n = rest.rpartition(":")
        return timed(int(n), lambda: socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM))
    if kind == "timeget":
        spec, _, n = rest.rpartition(":")
        spec, _, port = spec.rpartition(":")
        name, _, ip = spec.partition("@")

        def get():
            c = socket.create_connection((ip, int(port)), timeout=T)
            c.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode())
            r = b""
            while True:
                b = c.recv(4096)
                if not b:
                    break
                r += b
            c.close()
            if b" 200 " not in r.split(b"\r\n", 1)[0]:
                raise OSError(0, "not 200")
        return timed(int(n), get)
    return "err:unknown_probe"


def timed(n, f):
    ds = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            ds.append((time.perf_counter() - t0) * 1000)
    except Exception as e:
        return err(e)
    ds.sort()
    return "ok:p50=%.2fms" % ds[len(ds) // 2]


for p in sys.argv[1:]:
    t0 = time.perf_counter()
    print(p, probe(p), flush=True)
    print("%s %.0fms" % (p, (time.perf_counter() - t0) * 1000), file=sys.stderr)
