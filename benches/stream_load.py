#!/usr/bin/env python3
"""Streamed-response load for benches/stream.sh. Standard library only.

  stream_load.py upstream PORT EVENTS GAP_MS
      An SSE upstream: every request gets EVENTS OpenAI-style chunks GAP_MS
      apart, then `data: [DONE]`. Each chunk carries its send time ("t", ns
      since the epoch), so the client can tell each event's latency.

  stream_load.py client URL CONCURRENCY SECONDS LABEL [STAGGER_MS]
      CONCURRENCY HTTP/1.1 connections, each requesting streams back to back
      for SECONDS; prints one JSON line: streams, events, time to first byte
      (request sent -> first body byte) and event latency (upstream send ->
      client receipt) percentiles in ms.

      Without STAGGER_MS every connection starts at once, so the streams run
      in lockstep: every stream's request, and then each of its events,
      reaches the server within the same millisecond as the others' (the
      worst case: each message waits behind the whole burst). With
      STAGGER_MS (say, one stream's duration) each connection first waits a
      random time in [0, STAGGER_MS): the same number of concurrent streams,
      at independent phases, as independent clients would send them.
"""
import asyncio
import json
import random
import re
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def upstream(port, events, gap_ms):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # Each event leaves at once (no Nagle delay behind the previous one).
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for i in range(events):
                    if i:
                        time.sleep(gap_ms / 1000)
                    doc = {"id": "b", "choices": [{"index": 0, "delta": {"content": "word %d " % i}}], "t": time.time_ns()}
                    data = ("data: " + json.dumps(doc) + "\n\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                data = b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


STAMP = re.compile(rb'"t":\s*(\d+)')


async def one_stream(reader, writer, host, path, ttfb, lat, since):
    sent = time.monotonic()
    if sent < since:
        # Ramping up (STAGGER_MS): not all streams are running yet.
        ttfb, lat = [], []
    writer.write(("GET %s HTTP/1.1\r\nhost: %s\r\naccept: text/event-stream\r\n\r\n" % (path, host)).encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode())
    first = True
    buf = b""
    events = 0
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            break
        chunk = await reader.readexactly(size + 2)
        now_wall = time.time_ns()
        if first:
            ttfb.append((time.monotonic() - sent) * 1000)
            first = False
        buf += chunk[:-2]
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            m = STAMP.search(ev)
            if m:
                lat.append((now_wall - int(m.group(1))) / 1e6)
                events += 1
    return events, sent >= since


async def client(url, conc, seconds, stagger_ms):
    m = re.match(r"http://([^/:]+):(\d+)(/.*)", url)
    host, port, path = m.group(1), int(m.group(2)), m.group(3)
    ttfb, lat, counts, errors = [], [], [0, 0, 0], []
    since = time.monotonic() + stagger_ms / 1000
    stop = since + seconds

    async def worker(offset):
        await asyncio.sleep(offset)
        reader, writer = await asyncio.open_connection(host, port)
        while time.monotonic() < stop:
            try:
                # Awaited first: `counts[1] += await ...` would read the
                # count before the await and lose the other tasks' events.
                n, measured = await one_stream(reader, writer, host, path, ttfb, lat, since)
                counts[2] += n
                if measured:
                    counts[0] += 1
                    counts[1] += n
            except Exception as e:  # noqa: BLE001 - reported, then reconnect
                errors.append(str(e))
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
        writer.close()

    rng = random.Random(7)
    offsets = [rng.uniform(0, stagger_ms / 1000) for _ in range(conc)]
    await asyncio.gather(*(worker(o) for o in offsets))
    return ttfb, lat, counts, errors


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def main():
    if sys.argv[1] == "upstream":
        upstream(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    url, conc, seconds, label = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    stagger_ms = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    ttfb, lat, (streams, events, events_all), errors = asyncio.run(client(url, conc, seconds, stagger_ms))
    print(json.dumps({
        "label": label, "streams": streams, "events": events, "events_all": events_all, "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "ttfb_p50_ms": pct(ttfb, 0.5), "ttfb_p99_ms": pct(ttfb, 0.99),
        "event_p50_ms": pct(lat, 0.5), "event_p99_ms": pct(lat, 0.99),
    }))


if __name__ == "__main__":
    main()
