#!/usr/bin/env python3
"""A counting proxy for an engine's unix socket, for the benchmarks.

    count_proxy.py LISTEN_SOCKET UPSTREAM_SOCKET LOG

Listens on LISTEN_SOCKET, passes every byte both ways to UPSTREAM_SOCKET,
and appends one line per HTTP request it sees a client send, "METHOD PATH",
to LOG (flushed at once, so a benchmark can count the lines a run added).

A request is a line "METHOD PATH HTTP/1.x" at the start of what a client
sends or right after the end of a request's headers; bodies are skipped by
Content-Length, and a chunked body (Docker's clients send none for the calls
counted here) by its chunks. Runs until killed.
"""

import asyncio
import os
import re
import sys

REQUEST = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]$")


class Counter:
    """Finds request lines in one client's byte stream."""

    def __init__(self, log):
        self.log = log
        self.buffer = b""
        self.skip = 0  # body bytes still to pass over
        self.chunked = False

    def feed(self, data):
        self.buffer += data
        while True:
            if self.skip:
                taken = min(self.skip, len(self.buffer))
                self.buffer = self.buffer[taken:]
                self.skip -= taken
                if self.skip:
                    return
            if self.chunked:
                if not self.skip_chunk():
                    return
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            lines = head.split(b"\r\n")
            match = REQUEST.match(lines[0])
            if match:
                self.log.write(f"{match[1].decode()} {match[2].decode()}\n")
                self.log.flush()
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            self.skip = int(headers.get(b"content-length", b"0") or 0)
            self.chunked = headers.get(b"transfer-encoding", b"").lower() == b"chunked"

    def skip_chunk(self):
        """Passes over one chunk; False when more bytes are needed."""
        line_end = self.buffer.find(b"\r\n")
        if line_end < 0:
            return False
        size = int(self.buffer[:line_end].split(b";")[0], 16)
        if len(self.buffer) < line_end + 2 + size + 2:
            return False
        self.buffer = self.buffer[line_end + 2 + size + 2 :]
        if size == 0:
            self.chunked = False
        return True


async def pipe(reader, writer, counter=None):
    try:
        while data := await reader.read(65536):
            if counter:
                counter.feed(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(listen, upstream, log_path):
    log = open(log_path, "a", encoding="utf-8")

    async def serve(client_reader, client_writer):
        try:
            engine_reader, engine_writer = await asyncio.open_unix_connection(upstream)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, engine_writer, Counter(log)),
            pipe(engine_reader, client_writer),
        )

    if os.path.exists(listen):
        os.unlink(listen)
    server = await asyncio.start_unix_server(serve, path=listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: count_proxy.py LISTEN_SOCKET UPSTREAM_SOCKET LOG")
    asyncio.run(main(*sys.argv[1:]))
