# limits.py: probes a sandbox's connection and bandwidth limits.
#   limits.py conns HOST PORT N   hold N connections, try one more (it must
#                                 fail under a limit of N), close one and
#                                 connect again (it must work)
#   limits.py down URL            download URL, print bytes and seconds
#   limits.py up HOST PORT BYTES  POST BYTES to http://HOST:PORT/sink and
#                                 print the server's answer (its own timing)
import http.client, os, socket, sys, time, urllib.request


def err(e):
    return os.strerror(e.errno) if getattr(e, "errno", None) else str(e)


def conns(host, port, n):
    held = []
    for _ in range(n):
        held.append(socket.create_connection((host, port), timeout=5))
    print("held", len(held))
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("extra connected")
    except OSError as e:
        print("extra refused:" + err(e))
    held.pop().close()
    deadline = time.time() + 15
    while True:
        try:
            s = socket.create_connection((host, port), timeout=3)
            print("after_close connected")
            held.append(s)
            break
        except OSError as e:
            if time.time() > deadline:
                print("after_close refused:" + err(e))
                break
            time.sleep(0.2)
    for s in held:
        s.close()


def down(url):
    t0 = time.time()
    n = 0
    with urllib.request.urlopen(url, timeout=60) as r:
        while True:
            b = r.read(1 << 16)
            if not b:
                break
            n += len(b)
    print("down", n, round(time.time() - t0, 3))


def up(host, port, size):
    chunk = b"u" * (1 << 16)

    def body():
        left = size
        while left > 0:
            yield chunk[: min(left, len(chunk))]
            left -= min(left, len(chunk))

    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("POST", "/sink", body=body(), headers={"Content-Length": str(size)})
    print("up", c.getresponse().read().decode())


mode = sys.argv[1]
if mode == "conns":
    conns(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif mode == "down":
    down(sys.argv[2])
elif mode == "up":
    up(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
