# reach.py HOST:PORT...: tries a TCP connection to each target (2 s
# timeout) and prints "target verdict" lines: "connected" or the error.
# Then it reports the interfaces it can see and whether a raw ICMP socket
# reaches anything.
import os, socket, sys

def icmp(target):
    # icmp/HOST: a raw ICMP echo request to HOST.
    host = target[len("icmp/"):]
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError as e:
        return "refused:" + os.strerror(e.errno)
    try:
        s.sendto(bytes([8, 0, 0xF7, 0xFF, 0, 0, 0, 0]), (host, 0))
        return "sent"
    except OSError as e:
        return "refused:" + os.strerror(e.errno)
    finally:
        s.close()


for target in sys.argv[1:]:
    if target.startswith("icmp/"):
        print(target, icmp(target))
        continue
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        print(target, "connected")
    except OSError as e:
        print(target, "refused:" + (os.strerror(e.errno) if e.errno else str(e)))
    finally:
        s.close()
print("interfaces", ",".join(sorted(n for _, n in socket.if_nameindex())))
