#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""make-corpus.py: writes the seed corpora of the fuzz targets.

Usage: tests/fuzz/make-corpus.py [DIR]   (default: tests/fuzz/corpus beside
this script).  Each target gets a few small inputs per op, built the way a
real client sends them, within the fuzzers' small limits (key 64, value 256,
8 keys per list, namespace 16).  TCPStore integers are little-endian, as on
every host torch runs on; the native protocol is little-endian by spec.
"""
import hashlib
import hmac
import os
import struct
import sys


def u8(v):
    return struct.pack('<B', v)


def u32(v):
    return struct.pack('<I', v)


def u64(v):
    return struct.pack('<Q', v & 0xffffffffffffffff)


def tstr(s):
    if isinstance(s, str):
        s = s.encode()
    return u64(len(s)) + s


def tlist(keys):
    return u64(len(keys)) + b''.join(tstr(k) for k in keys)


V2_HELLO = u8(0) + u32(0x3C85F7CE) + u8(13) + u32(0x1234)


def tcps113():
    c = {}
    c['set'] = u8(0) + tstr('/key') + tstr('value')
    c['set-empty'] = u8(0) + tstr('') + tstr('')
    c['set-binary'] = u8(0) + tstr('/bin') + tstr(bytes(range(200)))
    c['cas-create'] = u8(1) + tstr('/torch.rendezvous.x') + tstr('') + \
        tstr('Y2FuaW1hZGFt')
    c['cas'] = u8(1) + tstr('/k') + tstr('old') + tstr('new')
    c['get'] = u8(2) + tstr('/key')
    c['add-init'] = u8(3) + tstr('init/') + u64(1)
    c['add-neg'] = u8(3) + tstr('/ctr') + u64(-7)
    c['check'] = u8(4) + tlist(['/a', '/b', '/c'])
    c['check-empty'] = u8(4) + tlist([])
    c['wait'] = u8(5) + tlist(['/rank0'])
    c['wait-many'] = u8(5) + tlist(['/k%d' % i for i in range(8)])
    c['getnumkeys'] = u8(6)
    c['watch'] = u8(7) + tstr('/watched')
    c['delete'] = u8(8) + tstr('/gone')
    # A session as torch 1.13 sends it: init, set, wait, get.
    c['session'] = (u8(3) + tstr('init/') + u64(1) +
                    u8(0) + tstr('/master') + tstr('10.0.0.1:1234') +
                    u8(5) + tlist(['/master']) + u8(2) + tstr('/master'))
    c['trunc-set'] = (u8(0) + tstr('/key') + tstr('value'))[:-3]
    c['toobig-key'] = u8(2) + u64(65) + b'k' * 8
    c['toobig-count'] = u8(4) + u64(9)
    c['bad-op'] = u8(9) + tstr('/x')
    return c


def tcps2():
    c = {}
    c['hello'] = V2_HELLO
    c['validate'] = u8(0) + u32(0x3C85F7CE)
    c['validate-bad'] = u8(0) + u32(0x3C85F7CF)
    c['set'] = V2_HELLO + u8(1) + tstr('/key') + tstr('value')
    c['cas'] = u8(2) + tstr('/k') + tstr('') + tstr('Y2FuaW1hZGFt')
    c['get'] = u8(3) + tstr('/key')
    c['add'] = V2_HELLO + u8(4) + tstr('init/') + u64(1)
    c['check'] = u8(5) + tlist(['/a', '/b'])
    c['wait'] = u8(6) + tlist(['/a'])
    c['getnumkeys'] = u8(7)
    c['delete'] = u8(8) + tstr('/d')
    c['append'] = u8(9) + tstr('/log') + tstr('more')
    c['multi-get'] = u8(10) + tlist(['/x', '/y', '/z'])
    c['multi-set'] = u8(11) + u64(2) + tstr('/x') + tstr('1') + \
        tstr('/y') + tstr('22')
    c['multi-set-neg'] = u8(11) + u64(-1)
    c['cancel-wait'] = u8(6) + tlist(['/slow']) + u8(12)
    c['ping'] = u8(13) + u32(0xdeadbeef)
    c['queue-push'] = u8(14) + tstr('/q') + tstr('item')
    c['queue-pop'] = u8(15) + tstr('/q')
    c['queue-len'] = u8(16) + tstr('/q')
    c['list-keys'] = u8(17)
    c['barrier'] = u8(18) + tstr('/barrier') + u64(4)
    c['trunc-multi-set'] = (u8(11) + u64(2) + tstr('/x') + tstr('1'))
    c['toobig-value'] = u8(1) + tstr('/k') + u64(257)
    c['bad-op'] = u8(19)
    return c


def nhdr(body_len, op, flags, rid):
    return u32(8 + body_len) + struct.pack('<HHI', op, flags, rid)


def fb(s):
    if isinstance(s, str):
        s = s.encode()
    return b'b' + u32(len(s)) + s


def fi(v):
    return b'i' + struct.pack('<q', v)


def frame(op, fields, flags=0, rid=1):
    body = b''.join(fields)
    return nhdr(len(body), op, flags, rid) + body


PRE = b'RDZV' + bytes([1, 0, 0, 0])
REPLY, ERROR, PUSH = 1, 2, 4


def native():
    ns, k, v = fb('job1/3'), fb('key'), fb('value')
    keys = [fb('k%d' % i) for i in range(3)]
    req = {
        1: [fb('ping')],
        2: [ns, k, v],
        3: [ns, k],
        4: [ns, k, fi(5)],
        5: [ns, k, fb(''), v],
        6: [ns, fi(-1), fi(3)] + keys,
        7: [ns, fi(3)] + keys,
        8: [ns, k],
        9: [ns],
        10: [ns, k, v],
        11: [ns, fi(3)] + keys,
        12: [ns, fi(2), fb('a'), fb('1'), fb('b'), fb('2')],
        13: [ns, k, v],
        14: [ns, k, fi(1000)],
        15: [ns, k],
        16: [ns],
        17: [ns, k, fi(8), fi(-1)],
        18: [fi(7)],
        19: [ns, k],
        20: [ns, k, fi(1), fb('old'), fb('new')],
        21: [fb('job'), fb('inst'), fb('host'), fb('10.0.0.1'), fi(42),
             fi(8), fi(1), fi(4), fi(3), fi(-1), fi(-1)],
        22: [fb('job'), fi(1)],
        23: [fb('job'), fi(1)],
        24: [fb('job'), fi(1), fi(2), fi(0), fi(0), fi(1), fi(0),
             fb('worker 0 exited 1')],
        25: [fb('job'), fi(1), fi(2)],
        26: [fb('job'), fi(2), fi(1), fi(1), fi(0), fi(2), fi(16), fi(0),
             fi(0), fi(3), fb('job/2'), fi(29500), fb('')],
        27: [fb('job')],
        28: [],
        29: [],
        30: [fb('job')],
        31: [fb('job'), fi(-1), fi(1000)],
        32: [fb('job'), fb('operator')],
        33: [fb('job'), fi(1)],
        34: [fb(bytes(32))],
        35: [fb(bytes(range(32))), fb(bytes(32))],
        36: [fb('job'), fi(1), fi(3), fi(1)],
        37: [fb('job'), fi(1), fi(3), fi(1), fb('straggler: replaced')],
        38: [fb('job'), fi(1), fi(3), fi(-1), fb('evicted by an operator')],
        39: [fb('job')],
    }
    rep = {
        1: [fb('ping')], 2: [], 3: [v], 4: [fi(6)], 5: [v], 6: [],
        7: [fi(1)], 8: [fi(1)], 9: [fi(42)], 10: [],
        11: [fb('1'), fb('2'), fb('3')], 12: [], 13: [], 14: [v],
        15: [fi(0)], 16: [fi(2), fb('a'), fb('b')], 17: [], 18: [], 19: [],
        21: [fi(1), fi(0), fi(1500)], 22: [fi(2)], 27: [fb('node 1 running\n')],
        28: [fb('{"version": "0.1.0"}')], 29: [fb('[]')],
        30: [fb('{"job": "job"}')], 31: [fb('[]')], 33: [fi(1)],
        35: [fb(bytes(32))],
    }
    names = {1: 'ping', 2: 'set', 3: 'get', 4: 'add', 5: 'cas', 6: 'wait',
             7: 'check', 8: 'delete', 9: 'num-keys', 10: 'append',
             11: 'multi-get', 12: 'multi-set', 13: 'queue-push',
             14: 'queue-pop', 15: 'queue-len', 16: 'list-keys',
             17: 'barrier', 18: 'cancel', 19: 'watch', 20: 'watch-event',
             21: 'join', 22: 'heartbeat', 23: 'leave', 24: 'failure',
             25: 'succeeded', 26: 'round', 27: 'job-status',
             28: 'admin-status', 29: 'admin-jobs', 30: 'admin-job',
             31: 'admin-events', 32: 'admin-close', 33: 'admin-evict',
             34: 'auth-challenge', 35: 'auth', 36: 'ready',
             37: 'straggler', 38: 'drain', 39: 'admin-forget'}
    c = {}
    for op, fields in req.items():
        push = op in (20, 26, 34, 37, 38)
        flags = PUSH if push else 0
        rid = 0 if push else op
        c['req-' + names[op]] = PRE + frame(op, fields, flags, rid)
    for op, fields in rep.items():
        c['rep-' + names[op]] = frame(op, fields, REPLY, op)
    c['err-notfound'] = frame(3, [fi(-4), fb('not found')], REPLY | ERROR, 3)
    c['err-canceled'] = frame(6, [fi(-6), fb('cancelled')], REPLY | ERROR, 9)
    c['pipeline'] = PRE + b''.join(
        frame(op, req[op], 0, 100 + op) for op in (2, 4, 3, 6, 18))
    # Frames past the writer's 512-byte stage, up to the fuzzers' frame
    # limit (8 + 4 * 5 + 9 + 16 + 64 + 2 * 256 = 629 bytes of body).
    c['req-set-large'] = PRE + frame(2, [ns, fb('k' * 250), fb('v' * 256)])
    c['req-cas-max'] = PRE + frame(5, [fb('n' * 16), fb('k' * 64),
                                       fb('e' * 256), fb('d' * 256)])
    c['rep-multi-get-large'] = frame(11, [fb('x' * 200)] * 3, REPLY, 11)
    c['preamble'] = PRE
    c['preamble-auth'] = b'RDZV' + bytes([1, 1, 0, 0]) + \
        frame(34, req[34], PUSH, 0)
    c['preamble-v2'] = b'RDZV' + bytes([2, 0, 0, 0])
    c['preamble-v0'] = b'RDZV' + bytes([0, 0, 0, 0])
    # rdzvd's refusal of a plaintext client when TLS is required, and the
    # flag on a version the decoder accepts.
    c['preamble-tls-refusal'] = b'RDZV' + bytes([0, 2, 0, 0])
    c['preamble-tls-flag'] = b'RDZV' + bytes([1, 2, 0, 0]) + \
        frame(2, req[2])
    c['trunc'] = (PRE + frame(2, req[2]))[:-2]
    c['bad-op'] = PRE + nhdr(0, 40, 0, 1)
    # Repair rounds' trailing fields (PROTOCOL.md "Repair rounds").
    c['req-join-repairs'] = PRE + frame(21, req[21] + [fi(-1), fi(1000),
                                                       fi(60000)])
    # Stragglers' trailing fields (PROTOCOL.md "Stragglers").
    c['req-join-stragglers'] = PRE + frame(21, req[21] + [
        fi(-1), fi(-1), fi(-1), fi(500), fi(30000), fi(1)])
    # Replica groups (JOIN's replicas, after the straggler fields).
    c['req-join-replicas'] = PRE + frame(21, req[21] + [
        fi(-1), fi(-1), fi(-1), fi(-1), fi(-1), fi(-1), fi(2)])
    c['req-admin-evict-now'] = PRE + frame(33, req[33] + [fi(1)])
    c['req-heartbeat-repairable'] = PRE + frame(22, req[22] + [fi(1)])
    c['req-failure-repair'] = PRE + frame(24, req[24] + [fi(1)])
    c['req-round-shrink'] = PRE + frame(26, req[26] + [fi(1), fi(0), fi(5)],
                                        PUSH, 0)
    c['req-round-grow'] = PRE + frame(26, req[26] + [fi(2), fi(1), fi(7)],
                                      PUSH, 0)
    c['bad-len'] = PRE + u32(7) + struct.pack('<HHI', 1, 0, 1)
    c['toobig'] = PRE + u32(1 << 20) + struct.pack('<HHI', 2, 0, 1)
    c['bad-field'] = PRE + frame(2, [ns, k, b'b' + u32(99) + b'short'])
    return c


# fuzz_handshake: byte 0 bit 0 gives the client a token, byte 1 picks
# where to cut, then rdzvd's bytes.  The client's nonce is fixed (byte i
# is i * 7 + 1) so that rdzvd's right answer can be written here.
HS_TOKEN = b'fuzz-token'
HS_CN = bytes((i * 7 + 1) & 0xff for i in range(32))
HS_SN = bytes(range(100, 132))


def hs_mac(tag, first, second):
    return hmac.new(HS_TOKEN, tag + first + second, hashlib.sha256).digest()


def handshake():
    tok, none = b'\x01\x05', b'\x00\x03'
    pre_auth = b'RDZV' + bytes([1, 1, 0, 0])
    challenge = frame(34, [fb(HS_SN)], PUSH, 0)
    proof = frame(35, [fb(hs_mac(b'rdzv-auth-v1 server', HS_CN, HS_SN))],
                  REPLY, 1)
    session = frame(26, [fb('job')], PUSH, 0)
    c = {}
    c['plain'] = none + PRE + session
    c['plain-token'] = tok + PRE
    c['auth'] = tok + pre_auth + challenge + proof + session
    c['auth-no-token'] = none + pre_auth + challenge
    c['auth-wrong-token'] = tok + pre_auth + challenge + frame(
        35, [fi(-10), fb('wrong token')], REPLY | ERROR, 1)
    c['auth-bad-proof'] = tok + pre_auth + challenge + frame(
        35, [fb(bytes(32))], REPLY, 1)
    c['auth-other-code'] = tok + pre_auth + challenge + frame(
        35, [fi(-1), fb('bad\nrequest')], REPLY | ERROR, 1)
    c['auth-short-nonce'] = tok + pre_auth + frame(34, [fb(HS_SN[:31])],
                                                   PUSH, 0)
    c['auth-trunc'] = (tok + pre_auth + challenge + proof)[:-5]
    c['tls-refusal'] = tok + b'RDZV' + bytes([0, 2, 0, 0])
    c['version-refusal'] = none + b'RDZV' + bytes([0, 0, 0, 0])
    c['not-rdzvd'] = none + b'HTTP/1.1 400 Bad Request\r\n\r\n'
    c['toobig'] = tok + pre_auth + u32(1 << 20)
    return c


def chan_fmt_round(rnd, kind, rank, world, donor, port, lrank, lworld,
                   ns, addr):
    """An input whose format half (fuzz_chan.c fuzz_format) reads as this
    round, into a buffer of 513 bytes; small numbers (-2..61) take one
    byte, others five."""
    def num(v):
        if -2 <= v <= 61:
            return bytes([v + 2])
        return b'\x80' + struct.pack('>I', v & 0xffffffff)
    tail = ns + addr
    cut = next(b for b in range(256) if b * 4 % (len(tail) + 1) == len(ns))
    return (bytes([4, 0x02, 0x01]) + num(rnd) + bytes([kind]) + num(rank) +
            num(world) + num(donor) + num(port) + b'\x00' + num(lrank) +
            num(lworld) + bytes([cut]) + tail)


def chan():
    """Datagrams of the worker <-> agent channel (common/PROTOCOL.md
    "Worker <-> agent channel"), both ways: each seed is one whole
    message for the parse half; fuzz_format reads the same bytes as a
    message to write (the fmt-* seeds are made for it)."""
    c = {}
    # Worker -> agent.
    for name, m in (('step', b'1234'), ('step-max', b'9223372036854775807'),
                    ('step-over', b'9223372036854775808'),
                    ('step-zeros', b'00000000000000000042'),
                    ('step-junk', b'12x'), ('step-key', b'17 t=3'),
                    ('hello', b'hello repair=1'),
                    ('hello-plain', b'hello'),
                    ('hello-more', b'hello v=2 repair=1 nccl=1'),
                    ('hello-bad', b'hello repair=11'),
                    ('ready', b'ready'), ('wait', b'wait'),
                    ('wait-more', b'wait since=12'),
                    ('unknown', b'stats a=1 b'),
                    ('double-space', b'hello  repair=1'),
                    ('tab', b'hello\trepair=1'), ('nul', b'ready\0'),
                    ('long', b'hello repair=1 x=' + b'x' * 495)):
        c[name] = m
    # Agent -> worker.
    c['round-grow'] = (b'round round=2 kind=grow ns=job/j1/round/2 rank=3 '
                       b'world=4 donor=0 master_addr=127.0.0.1 '
                       b'master_port=29500 local_rank=1 local_world=2')
    c['round-shrink'] = (b'round round=1 kind=shrink ns=job/a/b/round/1 '
                         b'rank=0 world=3 donor=1 master_addr=::1 '
                         b'master_port=1 local_rank=0 local_world=1')
    c['round-unknown-key'] = (b'round round=1 kind=shrink ns=x rank=0 '
                              b'world=1 donor=0 master_addr=h '
                              b'master_port=9 local_rank=0 local_world=1 '
                              b'future=yes')
    c['stop'] = b'stop'
    c['leave'] = b'leave'
    c['unknown-verb'] = b'rewind to=3'
    c['bad-rank'] = (b'round round=1 kind=grow ns=x rank=2 world=2 donor=0 '
                     b'master_addr=h master_port=9 local_rank=0 '
                     b'local_world=1')
    c['bad-number'] = b'round round=1 kind=grow ns=x rank=+1 world=2 donor=0'
    c['no-store'] = b'round round=1 kind=grow rank=0 world=2 donor=0'
    # For the format half.
    c['fmt-round'] = chan_fmt_round(3, 2, 1, 2, 0, 29403, 0, 1,
                                    b'job/x/round/3', b'127.0.0.1')
    c['fmt-round-space'] = chan_fmt_round(3, 1, 0, 1, 0, 29403, 0, 1,
                                          b'job/a b/round/3', b'::1')
    c['fmt-round-long'] = chan_fmt_round(70, 1, 0, 1, 0, 65535, 100, 200,
                                         b'n' * 420, b'h' * 40)
    c['fmt-progress'] = bytes([1, 0x02, 0x01, 1]) + struct.pack('>Q', 1 << 62)
    c['fmt-hello'] = bytes([2, 0x02, 0x01, 3])
    return c


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, 'corpus')
    for target, seeds in (('fuzz_tcps113', tcps113()),
                          ('fuzz_tcps2', tcps2()),
                          ('fuzz_native', native()),
                          ('fuzz_handshake', handshake()),
                          ('fuzz_chan', chan())):
        d = os.path.join(top, target)
        os.makedirs(d, exist_ok=True)
        for name, data in sorted(seeds.items()):
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
        print('%s: %d seeds' % (d, len(seeds)))


if __name__ == '__main__':
    main()
