#!/usr/bin/python3
"""dqlite_wire.py — one statement sent to a dqlite cluster's leader the way a
raw client sends it: QUERY_SQL or EXEC_SQL on its own, outside any
transaction (the `dqlite` shell wraps every command in BEGIN ... COMMIT, so
it cannot send this).  tests/cluster/t_cluster.sh uses it to check bfnode's write
guard (examples/dqlite/README.md, "dqlite 1.11").

    /usr/bin/python3 tests/cluster/dqlite_wire.py HOST:PORT[,HOST:PORT...] query|exec SQL

Prints the rows as the sqlite3 shell does (columns joined by "|", NULL
empty), or "changes N" for exec; on a FAILURE response prints "error: MESSAGE"
and exits 1; exits 2 when no node answers or the connection breaks.

dqlite wire protocol version 1 (dqlite src/request.h, response.h, tuple.h):
an 8-byte handshake (the version), then messages of an 8-byte header (body
size in 8-byte words, type, schema 0, 0) and a body of little-endian uint64s
and NUL-terminated UTF-8 texts padded to 8 bytes.
"""
import socket
import struct
import sys

LEADER, OPEN, EXEC_SQL, QUERY_SQL = 0, 3, 8, 9  # requests
FAILURE, SERVER, DB, RESULT, ROWS = 0, 1, 4, 6, 7  # responses
INTEGER, FLOAT, TEXT, BLOB, NULL = 1, 2, 3, 4, 5  # value types in a row
ROWS_DONE, ROWS_PART = b"\xee" * 8, b"\xff" * 8


def text(s):
    b = s.encode() + b"\0"
    return b + b"\0" * (-len(b) % 8)


def read_text(body, off):
    end = body.index(b"\0", off)
    return body[off:end].decode(), end + 1 + (-(end + 1) % 8)


class Node:
    def __init__(self, address):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(struct.pack("<Q", 1))

    def call(self, kind, body):
        self.sock.sendall(struct.pack("<IBBH", len(body) // 8, kind, 0, 0) + body)
        words, reply = struct.unpack("<IB", self.recv(8)[:5])
        return reply, self.recv(words * 8)

    def recv(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("the node closed the connection")
            data += chunk
        return data


def find_leader(addresses):
    for address in addresses:
        try:
            reply, body = Node(address).call(LEADER, struct.pack("<Q", 0))
        except OSError:
            continue
        if reply == SERVER:
            leader = read_text(body, 8)[0]
            if leader:
                return leader
    return None


def rows(body):
    ncols, off = struct.unpack("<Q", body[:8])[0], 8
    for _ in range(ncols):
        off = read_text(body, off)[1]
    out = []
    while off < len(body) and body[off : off + 8] not in (ROWS_DONE, ROWS_PART):
        types = [(body[off + i // 2] >> (4 * (i % 2))) & 0xF for i in range(ncols)]
        off += -(-((ncols + 1) // 2) // 8) * 8  # 4 bits a column, padded to 8 bytes
        row = []
        for t in types:
            if t == TEXT:
                value, off = read_text(body, off)
            elif t == FLOAT:
                value, off = repr(struct.unpack("<d", body[off : off + 8])[0]), off + 8
            elif t == NULL:
                value, off = "", off + 8
            elif t == BLOB:
                n = struct.unpack("<Q", body[off : off + 8])[0]
                value, off = body[off + 8 : off + 8 + n].decode(errors="replace"), off + 8 + n + (-n % 8)
            else:  # integer, and dqlite's unixtime and boolean
                value, off = str(struct.unpack("<q", body[off : off + 8])[0]), off + 8
            row.append(value)
        out.append("|".join(row))
    return out


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("query", "exec"):
        sys.exit(__doc__.split("\n\n")[1])
    leader = find_leader(sys.argv[1].split(","))
    if leader is None:
        print("no leader among %s" % sys.argv[1])
        return 2
    try:
        node = Node(leader)
        reply, body = node.call(OPEN, text("demo") + struct.pack("<Q", 6) + text("test"))
        if reply == DB:
            db = struct.unpack("<I", body[:4])[0]
            kind = QUERY_SQL if sys.argv[2] == "query" else EXEC_SQL
            no_params = b"\0" * 8
            reply, body = node.call(kind, struct.pack("<Q", db) + text(sys.argv[3]) + no_params)
    except (OSError, EOFError) as e:
        print("leader %s: %s" % (leader, e))
        return 2
    if reply == FAILURE:
        print("error: %s" % read_text(body, 8)[0])
        return 1
    if reply == ROWS:
        print("\n".join(rows(body)))
    elif reply == RESULT:
        print("changes %d" % struct.unpack("<QQ", body[:16])[1])
    else:
        print("unexpected response type %d" % reply)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
