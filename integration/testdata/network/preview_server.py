# A test server for the preview proxy, standard library only: it listens
# on 127.0.0.1 only and serves
#   /headers  the request's path and headers as JSON
#   /sse      two Server-Sent Events: the second once /release is asked
#             for (or after 60 s), so that a proxy that buffers is told
#             from a slow host by a wide margin
#   /release  lets the current /sse stream send its second event
#   /ws       a WebSocket echo (text and binary frames)
import base64, hashlib, json, struct, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/headers"):
            body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/sse":
            release = threading.Event()
            self.server.release = release
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(2):
                self.wfile.write(b"data: tick %d\n\n" % i)
                self.wfile.flush()
                if i == 0:
                    release.wait(60)
            self.close_connection = True
        elif self.path == "/release":
            getattr(self.server, "release", threading.Event()).set()
            self.send_response(204)
            self.end_headers()
        elif self.path == "/ws":
            self.websocket()
        else:
            self.send_error(404)

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            head = r.read(2)
            if len(head) < 2:
                break
            op, n = head[0] & 0x0F, head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:  # close: answer and stop
                w.write(bytes([0x88, len(data)]) + data)
                w.flush()
                break
            if op in (1, 2):
                hdr = bytes([0x80 | op])
                if len(data) < 126:
                    hdr += bytes([len(data)])
                elif len(data) < 65536:
                    hdr += bytes([126]) + struct.pack(">H", len(data))
                else:
                    hdr += bytes([127]) + struct.pack(">Q", len(data))
                w.write(hdr + data)
                w.flush()
        self.close_connection = True


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
