#!/usr/bin/python3
"""t_shared_batch.py — the machine-wide batcher (ext/sqlite/shared_batch.c)
with real processes, each test in its own scratch directory for the shared
files (BERTFILL_SHARED_BATCH_DIR) so that other runs on the machine do not
join:

  * same_answers: 8 processes x 200 calls of mixed texts (bert_fill and
    fill_candidates k=3, 1-3 masks), cache off: every answer equals the one
    of a single process with shared batching off (token ids equal,
    probabilities within 1e-5), and shared batches really happened
    (shared_served, shared_batches, shared_remote > 0);
  * leader_kill: 50 times, the leader is SIGKILLed while its batch is TAKEN
    (the hold hook keeps each batch 150 ms between taking and running): the
    other processes' calls all answer right, none fails, none waits more
    than the busy timeout, and the dead leaders' requests were run again
    (shared_rerun > 0); one shared file in the end; a fifth process that is
    never killed reports its RSS (in the soak, SB_KILL_SECONDS: it must stay
    flat);
  * requester_kill: processes killed while their requests wait; then slots
    left behind by dead owners (written into the file, no lock behind them)
    are taken over (shared_reclaimed) and every call still answers right;
  * models_precisions: tiny fp32, tiny int8 and small fp32 in processes at
    once: three files, each process's answers those of its own model;
  * other_user: a process running as nobody uses its own file (its uid),
    cannot open root's, refuses a file of its name that root made; root's
    processes refuse a file of their name owned by nobody;
  * refused_files: garbage of the right size, a symbolic link, mode 0644:
    one warning on stderr, right answers from the process's own batcher,
    bert_debug says usable false; a file of another size (cut short, or an
    older bertfill's) that no process is attached to is replaced instead
    (replaced_truncated, replaced_older_version: batching stays on);
  * full_queue: every slot held by a live process: calls take the
    in-process path (shared_fallback), never an error;
  * fork: a process forks after its first call; parent and child then
    batch together (the child opens the file again) with right answers;
  * off: BERTFILL_SHARED_BATCH=0 makes no file and serves nothing;
  * stalled_process: a process that cannot get an encoder slot (every
    machine-wide slot held) never holds the lead meanwhile: another process
    answers at once and runs its requests too;
  * fast_path: one process alone, shared on vs off: same answers, nothing
    remote; the time per call of both is printed (measured, not asserted);
  * full_tmpfs (issue 41, 1): in a mount namespace of its own, the shared
    files on a 4 MB tmpfs with 100 KB or 196 KB free (a new file), or with
    196 KB free and a file another process made without reserving its
    pages (3 processes): no SIGBUS, right answers, one warning each;
    skipped with its reason where mounts are not allowed;
  * slot_writer (issue 41, 3): for 4 s a process of the same user flips the
    n of waiting slots between 3 and 0x100000, then (new processes) marks
    waiting slots DONE, while 4 processes call: none crashes, no error,
    every answer a lone process's;
  * stopped_leader (issue 41, 4): the leader SIGSTOPped with a batch TAKEN
    for 3 busy timeouts: the 4 others answer right, at least twice each,
    no error; after SIGCONT everyone (the stopped one too) answers right;
  * busy_message (issue 41, 4): a request not taken within the busy
    timeout while another process runs a long batch: the error is exactly
    "... waited N ms in the machine-wide queue of this model: 0 other
    requests waiting, 1 in the batch that process PID is running"; the request taken back
    leaves no token ids in the file;
  * herd (issue 38, 0): 30 processes spawned at once, each loading and
    calling at once, while a process holding the file's init lock is
    stopped (SIGSTOP, 2-3 s): their first calls run in their own processes
    (herd_held_lock_refused_first); once the lock is free, their next call
    opens the file: all usable, no error, no warning, right answers
    (herd_all_usable_later); then 30 more at once, nobody stopped: all
    usable after their first call (herd_at_once_usable);
  * linger (issue 38, 3): a leader keeps the lead after its call
    (BERTFILL_SHARED_LINGER_MS=1000): another process's next calls are
    run by its lingering thread (lead "kept"); its own next call leads at
    once ("post", its pid); 1.5 s without a request and the other process
    leads its own call; SIGKILLed while lingering idle, the other process
    leads at once; SIGKILLed in the middle of a kept batch (hold hook), the
    other's request is run again by it within 2 s; SIGSTOPped while
    lingering, the other's calls answer (the stall rule) within 1 s, not at
    its 5 s busy timeout; every answer a lone process's;
  * exit_cleanup (issue 40, 4): 4 processes use the queue; while one of
    them still runs the file stays and works (a new process batches with
    it); after the last exits normally no file is left; 5 rounds of 6
    processes that start at once and exit at once leave none either;
  * slot_texts_cleared (issue 40, 4): with two processes attached, after
    their calls answered (each ran requests of the other), no slot holds
    token ids or results, and the token ids of no text are in the file;
  * sigkill_cleanup (issue 40, 4): processes SIGKILLed with requests in
    flight leave the file; the next process clears their slots when it
    opens it and its first batch (checked while it runs), answers right,
    and removes the file when it exits.
Environment: BERTFILL_EXT, BUILD (as tests/run.sh sets them).
"""
import fcntl
import json
import mmap
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

from bftest import EXT, MODELS, TINY, check, exit_code, skip

SMALL = os.path.join(MODELS, "small")
TOL = 1e-5

# The worker: loads the extension and a model, then serves commands from the
# test on stdin, one JSON line each, and answers one JSON line each.
WORKER = r"""
import json, sqlite3, sys, time, os
ext, model, precision = sys.argv[1], sys.argv[2], sys.argv[3]
c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
c.enable_load_extension(True)
c.load_extension(ext)
c.execute("SELECT bert_load(?, ?)", (model, precision))
c.execute("SELECT bert_cache('off')")
def counters():
    return {r[0]: r[1] for r in c.execute(
        "SELECT name, value FROM bertfill_stats WHERE kind = 'counter'")}
def answer(t):
    f = c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0]
    rows = [[r[0], r[1], r[2], r[3]] for r in c.execute(
        "SELECT mask, rank, token_id, score FROM fill_candidates(?, 3)", (t,))]
    return [f, rows]
def run(texts, report_each=False):
    out, worst, errors = [], 0.0, []
    for t in texts:
        t0 = time.monotonic()
        try:
            a = answer(t)
        except sqlite3.Error as e:
            a = None
            errors.append(str(e))
        dt = time.monotonic() - t0
        worst = max(worst, dt)
        out.append(a)
        if report_each:
            print(json.dumps({"text": t, "answer": a, "dt": dt,
                              "err": errors[-1] if a is None else None}), flush=True)
    return out, worst, errors
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "run":
        out, worst, errors = run(cmd["texts"])
        print(json.dumps({"answers": out, "worst": worst, "errors": errors,
                          "counters": counters()}), flush=True)
    elif cmd["op"] == "loop":      # answers one line each, forever
        while True:
            run(cmd["texts"], report_each=True)
    elif cmd["op"] == "traced":    # bert_fill: answer, seconds, the trace's leader and lead
        c.execute("SELECT bert_trace(1)")
        calls = []
        for t in cmd["texts"]:
            t0 = time.monotonic()
            try:
                a, err = c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0], None
            except sqlite3.Error as e:
                a, err = None, str(e)
            dt = time.monotonic() - t0
            row = c.execute("SELECT leader_pid, lead FROM bertfill_trace ORDER BY id DESC "
                            "LIMIT 1").fetchone()
            calls.append([a, dt, row[0], row[1], err])
        print(json.dumps({"calls": calls}), flush=True)
    elif cmd["op"] == "debug":
        d = json.loads(c.execute("SELECT bert_debug()").fetchone()[0])
        print(json.dumps({"shared": d["shared_batch"], "counters": counters()}), flush=True)
    elif cmd["op"] == "fork":      # fork, both run the texts, the child reports through a pipe
        r, w = os.pipe()
        pid = os.fork()
        out, worst, errors = run(cmd["texts"])
        d = json.loads(c.execute("SELECT bert_debug()").fetchone()[0])["shared_batch"]
        res = {"answers": out, "errors": errors, "counters": counters(), "shared": d}
        if pid == 0:
            os.write(w, json.dumps(res).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            data += b
        os.waitpid(pid, 0)
        print(json.dumps({"parent": res, "child": json.loads(data)}), flush=True)
    elif cmd["op"] == "fork_close":  # fork; the child closes its connection and reports
        r, w = os.pipe()               # which of its mappings still come from the model's folder
        pid = os.fork()
        if pid == 0:
            c.close()
            real = os.path.realpath(model)
            left = sorted({l.split(None, 5)[5].strip() for l in open("/proc/self/maps")
                           if len(l.split(None, 5)) == 6
                           and l.split(None, 5)[5].startswith(real + "/")})
            os.write(w, json.dumps(left).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            data += b
        os.waitpid(pid, 0)
        print(json.dumps({"child_maps": json.loads(data)}), flush=True)
    elif cmd["op"] == "time":      # mean seconds per call of n calls
        t = cmd["text"]
        c.execute("SELECT bert_fill(?)", (t,)).fetchone()
        t0 = time.perf_counter()
        for i in range(cmd["n"]):
            c.execute("SELECT bert_fill(?)", (t,)).fetchone()
        print(json.dumps({"mean": (time.perf_counter() - t0) / cmd["n"]}), flush=True)
"""

CHARS = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
         "自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学")


def make_texts(n, seed):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s = [rnd.choice(CHARS) for _ in range(rnd.randint(3, 24))]
        for _ in range(1 + i % 3):
            s.insert(rnd.randint(0, len(s)), "[MASK]")
        out.append("".join(s))
    return out


class Worker:
    def __init__(self, env, model=TINY, precision="fp32", user=None, ext=EXT, wait=True):
        cmd = [sys.executable if not user else "/usr/bin/python3", "-c", WORKER, ext, model,
               precision]
        if user:
            cmd = ["setpriv", "--reuid=" + user, "--regid=nogroup", "--clear-groups"] + cmd
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, text=True, bufsize=1)
        if wait:
            self.ready()

    def ready(self):
        """Waits for the worker's first line (its model loaded)."""
        first = self.p.stdout.readline()
        if not first:
            raise RuntimeError("worker did not start: " + self.p.stderr.read()[-2000:])
        self.pid = json.loads(first)["ready"]

    def send(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def recv(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("worker died: " + self.p.stderr.read()[-2000:])
        return json.loads(line)

    def ask(self, **cmd):
        self.send(**cmd)
        return self.recv()

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        err = self.p.stderr.read()
        return err

    def kill(self):
        self.p.kill()
        self.p.wait()


def base_env(sdir, **extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("BERTFILL_"):
            e.pop(k)
    e.update(BERTFILL_SHARED_BATCH_DIR=sdir, OPENBLAS_NUM_THREADS="1")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def same(a, b):
    """Two answers [fill, rows] agree: same text, same ids, scores within TOL."""
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    for x, y in zip(a[1], b[1]):
        if x[:3] != y[:3] or abs(x[3] - y[3]) > TOL:
            return False
    return True


def count_wrong(results, texts, ref):
    """How many answers of the results ("answers" lists, one per text) differ from ref."""
    return sum(1 for r in results for a, t in zip(r["answers"], texts) if not same(a, ref[t]))


REFS = {}


def references(texts, model=TINY, precision="fp32"):
    """Answers of one process with shared batching off."""
    key = (model, precision)
    need = [t for t in texts if (key, t) not in REFS]
    if need:
        sdir = tempfile.mkdtemp(prefix="bf-sb-ref-")
        w = Worker(base_env(sdir, BERTFILL_SHARED_BATCH=0), model, precision)
        r = w.ask(op="run", texts=need)
        w.close()
        shutil.rmtree(sdir, ignore_errors=True)
        for t, a in zip(need, r["answers"]):
            REFS[(key, t)] = a
    return [REFS[(key, t)] for t in texts]


def shared_files(sdir):
    return sorted(f for f in os.listdir(sdir) if "-batch-" in f)


def read_header(path):
    """(slot_size, nslots, leader_pid, slot states) of a shared file."""
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        slot_size, nslots = struct.unpack_from("<II", m, 16)
        leader_pid = struct.unpack_from("<I", m, 68)[0]
        states = [struct.unpack_from("<I", m, 4096 + i * slot_size)[0] & STATE_BITS
                  for i in range(nslots)]
        m.close()
    return slot_size, nslots, leader_pid, states


TAKEN, POSTED = 3, 2
STATE_BITS = 0xF  # a slot's state word: the state, and the request's ticket above it


SLOT_DATA = 132  # offsetof(sb_slot, ids): token ids, then results, to the end of the slot


def slot_data(path):
    """(states, the slots whose token ids or results are not all zero, the
    file's bytes) of a shared file."""
    with open(path, "rb") as f:
        data = f.read()
    slot_size, nslots = struct.unpack_from("<II", data, 16)
    states, dirty = [], []
    for i in range(nslots):
        at = 4096 + i * slot_size
        states.append(struct.unpack_from("<I", data, at)[0] & STATE_BITS)
        if data[at + SLOT_DATA:at + slot_size].strip(b"\0"):
            dirty.append(i)
    return states, dirty, data


def token_ids(texts, model=TINY):
    """The token ids of each text (without [CLS] and [SEP]), as the model's
    tokenizer makes them."""
    import sqlite3
    vocab = {}
    with open(os.path.join(model, "vocab.txt"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            vocab.setdefault(line.rstrip("\n"), i)
    c = sqlite3.connect(":memory:")
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT bert_load(?)", (model,))
    out = [[vocab[t] for t in json.loads(c.execute("SELECT bert_tokenize(?)", (t,)).fetchone()[0])
            [1:-1]] for t in texts]
    c.close()
    return out


def texts_in(data, ids_list):
    """How many of the token id sequences are in data (as the slots store them)."""
    return sum(1 for ids in ids_list if struct.pack("<%di" % len(ids), *ids) in data)


def sum_counters(results, name):
    return sum(r["counters"].get(name, 0) for r in results)


# ---- the tests ----

def test_same_answers():
    texts = make_texts(120, seed=11)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_GATHER=4)
    ws = [Worker(env, SMALL if False else TINY) for _ in range(8)]
    rnd = random.Random(5)
    plans = [[rnd.choice(texts) for _ in range(200)] for _ in ws]
    for w, plan in zip(ws, plans):
        w.send(op="run", texts=plan)
    res = [w.recv() for w in ws]
    # the counters once every process is done: a process whose own calls
    # ended first keeps serving the others' while it keeps the lead (LINGER)
    for w, r in zip(ws, res):
        r["counters"] = w.ask(op="debug")["counters"]
    for w in ws:
        w.close()
    wrong = sum(1 for r, plan in zip(res, plans) for a, t in zip(r["answers"], plan)
                if not same(a, ref[t]))
    errors = sum(len(r["errors"]) for r in res)
    served = sum_counters(res, "shared_served")
    batches = sum_counters(res, "shared_batches")
    remote = sum_counters(res, "shared_remote")
    check("same_answers", wrong == 0 and errors == 0,
          "%d wrong answers, %d errors of 1600 calls" % (wrong, errors))
    check("same_answers_shared_batches", served > 0 and batches > 0 and remote == served,
          "served %d, batches %d, remote %d" % (served, batches, remote))
    print("   (8 x 200 calls: %d requests served for other processes in %d shared batches)"
          % (served, batches))
    shutil.rmtree(sdir, ignore_errors=True)


def test_leader_kill(rounds=int(os.environ.get("SB_KILL_ROUNDS", "50"))):
    texts = make_texts(40, seed=23)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_HOLD_MS=150)
    import selectors
    sel = selectors.DefaultSelector()
    ws = {}

    def spawn():
        w = Worker(env)
        w.send(op="loop", texts=random.Random(w.pid).sample(texts, len(texts)))
        ws[w.pid] = w
        sel.register(w.p.stdout, selectors.EVENT_READ, w)

    for _ in range(4):
        spawn()
    # one more process that is never killed (when it leads, no kill that
    # round): its memory over the run must stay flat.  It keeps no lead
    # after its calls (LINGER), or it would lead the whole time (the others'
    # leads, kept or not, are killed)
    observer = Worker(dict(env, BERTFILL_SHARED_LINGER_MS="0"))
    observer.send(op="loop", texts=random.Random(1).sample(texts, len(texts)))
    sel.register(observer.p.stdout, selectors.EVENT_READ, observer)
    rss = []  # (time, kB) of the observer

    def rss_kb(pid):
        with open("/proc/%d/status" % pid) as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    t_start = time.monotonic()
    path = None
    kills, hangs, waiting_since = 0, 0, None  # after a kill: no kill again before an answer came
    seen = {"answered": 0, "wrong": 0, "worst": 0.0, "errors": []}

    def read_answers(timeout):
        """Read what the workers answered within timeout; how many answers came."""
        got = 0
        for key, _ in sel.select(timeout=timeout):
            line = key.data.p.stdout.readline()
            if not line:
                continue
            r = json.loads(line)
            got += 1
            seen["worst"] = max(seen["worst"], r["dt"])
            if r["err"]:
                seen["errors"].append(r["err"])
            elif not same(r["answer"], ref[r["text"]]):
                seen["wrong"] += 1
        seen["answered"] += got
        return got
    deadline = time.monotonic() + float(os.environ.get("SB_KILL_SECONDS", "150"))
    while kills < rounds and time.monotonic() < deadline:
        if read_answers(0.005):
            waiting_since = None
        if not rss or time.monotonic() - rss[-1][0] > 5:
            rss.append((time.monotonic(), rss_kb(observer.pid)))
        if path is None:
            files = shared_files(sdir)
            if not files:
                continue
            path = os.path.join(sdir, files[0])
        if waiting_since is not None:
            if time.monotonic() - waiting_since > 2.0:  # the busy timeout: nobody answered
                hangs += 1
                waiting_since = None
            continue
        _, _, leader, states = read_header(path)
        if leader in ws and TAKEN in states:
            waiting_since = time.monotonic()
            w = ws.pop(leader)
            sel.unregister(w.p.stdout)
            w.kill()
            w.close()
            kills += 1
            spawn()
    # let the survivors answer a little longer, then collect their counters
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        read_answers(0.05)
    answered, wrong, worst, errors = seen["answered"], seen["wrong"], seen["worst"], seen["errors"]
    rss.append((time.monotonic(), rss_kb(observer.pid)))
    for w in list(ws.values()) + [observer]:
        w.kill()
        w.close()
    # memory: the observer's RSS from the end of its first tenth of the run
    # (warm: model pages, pools) to the end
    warm = [kb for t, kb in rss if t - t_start >= (rss[-1][0] - t_start) / 10] or [rss[-1][1]]
    growth = rss[-1][1] - warm[0]
    print("   (observer RSS %d kB after warming, %d kB at the end, %d samples)"
          % (warm[0], rss[-1][1], len(rss)))
    if os.environ.get("SB_KILL_SECONDS"):  # the soak: minutes, so a leak would show
        check("leader_kill_memory_flat", growth < 4096,
              "the observer's RSS grew by %d kB (%r)" % (growth, rss[::max(1, len(rss) // 10)]))
    files = shared_files(sdir)
    check("leader_kill_one_file", len(files) == 1, repr(files))
    enough = kills == rounds or (os.environ.get("SB_KILL_SECONDS") and kills >= 50)
    check("leader_kill", enough and wrong == 0 and not errors and worst < 2.0 and
          hangs == 0 and answered >= min(rounds, kills),
          "%d kills, %d answers, %d wrong, %d errors %r, slowest call %.2f s, %d times no answer "
          "within 2 s of a kill" % (kills, answered, wrong, len(errors), errors[:2], worst, hangs))
    print("   (%d leaders killed mid-batch; %d answers of the others, 0 wrong; slowest %.0f ms)"
          % (kills, answered, worst * 1000))
    shutil.rmtree(sdir, ignore_errors=True)


def test_rerun_counted():
    """One leader killed for certain with its batch TAKEN; the next leader
    counts the rerun and answers."""
    texts = make_texts(6, seed=31)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_HOLD_MS=400, BERTFILL_SHARED_GATHER=2)
    # The scene needs both requests taken in one batch; on a busy machine the
    # second may come after the first was taken alone (then nothing was shown
    # either way): up to 3 tries of the scene, each with fresh workers.
    for attempt in range(3):
        a, b = Worker(env), Worker(env)
        a.ask(op="run", texts=texts[:1])  # the file exists
        path = os.path.join(sdir, shared_files(sdir)[0])
        a.send(op="run", texts=texts[1:2])
        b.send(op="run", texts=texts[2:3])
        victim = None
        until = time.monotonic() + 5
        while time.monotonic() < until and victim is None:
            _, _, leader, states = read_header(path)
            if states.count(TAKEN) >= 2 and leader in (a.pid, b.pid):
                victim = leader
            time.sleep(0.005)
        if victim is not None:
            break
        for w in (a, b):
            w.kill()
            w.close()
    if victim is None:
        check("rerun_after_leader_death", False, "never saw a batch of two TAKEN in 3 tries")
        return
    dead, alive = (a, b) if victim == a.pid else (b, a)
    dead.kill()
    dead.close()
    r = alive.recv()
    d = alive.ask(op="debug")
    alive.close()
    t = texts[2] if alive is b else texts[1]
    check("rerun_after_leader_death",
          not r["errors"] and same(r["answers"][0], ref[t]) and d["counters"]["shared_rerun"] >= 1,
          "errors %r, counters %r" % (r["errors"], d["counters"]))
    shutil.rmtree(sdir, ignore_errors=True)


def test_requester_kill():
    texts = make_texts(30, seed=41)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_HOLD_MS=100)
    survivor = Worker(env)
    survivor.send(op="run", texts=texts)
    path = None
    kills = 0
    until = time.monotonic() + 30
    while kills < 10 and time.monotonic() < until:
        w = Worker(env)
        w.send(op="run", texts=texts)
        if path is None:
            time.sleep(0.05)
            files = shared_files(sdir)
            path = os.path.join(sdir, files[0]) if files else None
        t_kill = time.monotonic() + 1.0
        while time.monotonic() < t_kill:  # kill it while it waits, not while it leads
            if path:
                _, _, leader, states = read_header(path)
                if leader != w.pid and (POSTED in states or TAKEN in states):
                    break
            time.sleep(0.003)
        w.kill()
        w.close()
        kills += 1
    r = survivor.recv()
    wrong = count_wrong([r], texts, ref)
    check("requester_kill", kills == 10 and wrong == 0 and not r["errors"],
          "%d kills, %d wrong, errors %r" % (kills, wrong, r["errors"][:2]))
    # slots of dead owners (not FREE, no lock behind them): written into the
    # file by hand, every slot of the queue, while the survivor (idle)
    # keeps the file; a new process takes them over
    slot_size, nslots, _, _ = read_header(path)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        for i in range(nslots):
            struct.pack_into("<I", m, 4096 + i * slot_size, [POSTED, 4, 1][i % 3])
        m.close()
    w = Worker(env.copy() | {"BERTFILL_SHARED_HOLD_MS": "0"})
    r = w.ask(op="run", texts=texts[:5])
    d = w.ask(op="debug")
    err = w.close()
    survivor.close()
    wrong = count_wrong([r], texts[:5], ref)
    c = d["counters"]
    check("dead_slots_reclaimed",
          wrong == 0 and not r["errors"] and c["shared_reclaimed"] >= 1 and
          c["shared_fallback"] == 0,
          "wrong %d, errors %r, counters %r, stderr %r" % (wrong, r["errors"], c, err[-300:]))
    shutil.rmtree(sdir, ignore_errors=True)


def test_models_precisions():
    texts = make_texts(30, seed=51)
    kinds = [(TINY, "fp32"), (TINY, "int8"), (SMALL, "fp32")]
    refs = {k: dict(zip(texts, references(texts, *k))) for k in kinds}
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_GATHER=2)
    ws = [(k, Worker(env, *k)) for k in kinds for _ in range(2)]
    for _, w in ws:
        w.send(op="run", texts=texts)
    res = [(k, w.recv()) for k, w in ws]
    dbg = [w.ask(op="debug") for _, w in ws]
    files = shared_files(sdir)  # while they run: the last to exit removes each
    for _, w in ws:
        w.close()
    wrong = sum(1 for k, r in res for a, t in zip(r["answers"], texts) if not same(a, refs[k][t]))
    errors = sum(len(r["errors"]) for _, r in res)
    paths = set(d["shared"]["file"] for d in dbg)
    served = sum(r["counters"]["shared_served"] for _, r in res)
    check("models_precisions", wrong == 0 and errors == 0 and len(files) == 3 and
          len(paths) == 3 and served > 0,
          "%d wrong, %d errors, files %r, served %d" % (wrong, errors, files, served))
    shutil.rmtree(sdir, ignore_errors=True)


def test_other_user():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        skip("other_user", "needs root and setpriv")
        return
    texts = make_texts(10, seed=61)
    ref = dict(zip(texts, references(texts)))
    top = tempfile.mkdtemp(prefix="bf-sb-user-")
    os.chmod(top, 0o755)
    ext = os.path.join(top, "bertfill.so")
    shutil.copy(EXT + ".so" if not EXT.endswith(".so") else EXT, ext)
    os.chmod(ext, 0o755)
    model = os.path.join(top, "tiny")
    shutil.copytree(TINY, model)
    for f in os.listdir(model):
        os.chmod(os.path.join(model, f), 0o644)
    sdir = os.path.join(top, "shm")
    os.mkdir(sdir)
    os.chmod(sdir, 0o1777)  # like /dev/shm
    env = base_env(sdir)
    root = Worker(env, model, ext=ext)
    r0 = root.ask(op="run", texts=texts)
    rootfile = root.ask(op="debug")["shared"]["file"]
    try:
        nob = Worker(env, model, user="nobody", ext=ext)
    except RuntimeError as e:
        skip("other_user", "nobody cannot run the worker: %s" % str(e)[-200:])
        root.close()
        shutil.rmtree(top, ignore_errors=True)
        return
    root.send(op="run", texts=texts)
    nob.send(op="run", texts=texts)
    r1, r2 = root.recv(), nob.recv()
    d_root, d_nob = root.ask(op="debug"), nob.ask(op="debug")
    nob_err = nob.close()
    wrong = count_wrong([r0, r1, r2], texts, ref)
    st = os.stat(rootfile)
    # nobody cannot open root's file
    probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            "/usr/bin/python3", "-c", "open(%r, 'r+b')" % rootfile],
                           capture_output=True, text=True)
    size = st.st_size
    root.close()  # the last process of root: it removes root's file
    check("other_user_own_file",
          wrong == 0 and d_nob["shared"]["file"] != rootfile and
          "-65534-batch-" in d_nob["shared"]["file"] and d_nob["shared"]["usable"] and
          d_nob["counters"]["shared_remote"] == 0 and d_root["counters"]["shared_served"] == 0 and
          st.st_uid == 0 and (st.st_mode & 0o777) == 0o600 and probe.returncode != 0,
          "wrong %d, nobody %r, root %r, mode %o, probe rc %d, stderr %r" %
          (wrong, d_nob["shared"], d_root["counters"], st.st_mode, probe.returncode, nob_err[-300:]))
    # a file of nobody's name made by root: nobody refuses it (cannot open it)
    nobfile = d_nob["shared"]["file"]
    if os.path.lexists(nobfile):  # removed by nobody's last process
        os.unlink(nobfile)
    with open(nobfile, "wb") as f:
        f.write(b"\0" * 4096)
    os.chmod(nobfile, 0o600)
    nob = Worker(env, model, user="nobody", ext=ext)
    r = nob.ask(op="run", texts=texts[:3])
    d = nob.ask(op="debug")
    err = nob.close()
    # and a file of root's name owned by nobody: root refuses it
    if os.path.lexists(rootfile):
        os.unlink(rootfile)
    with open(rootfile, "wb") as f:
        f.write(b"\0" * size)
    os.chmod(rootfile, 0o600)
    os.chown(rootfile, 65534, 65534)
    root = Worker(env, model, ext=ext)
    r2 = root.ask(op="run", texts=texts[:3])
    d2 = root.ask(op="debug")
    err2 = root.close()
    wrong = count_wrong([r, r2], texts[:3], ref)
    check("other_user_foreign_files_refused",
          wrong == 0 and not d["shared"]["usable"] and not d2["shared"]["usable"] and
          err.count("shared batching off") == 1 and "belongs to another user" in err2,
          "wrong %d, nobody %r, root %r, stderr %r / %r" %
          (wrong, d["shared"], d2["shared"], err[-200:], err2[-200:]))
    shutil.rmtree(top, ignore_errors=True)


def test_refused_files():
    texts = make_texts(8, seed=71)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir)
    w = Worker(env)
    w.ask(op="run", texts=texts[:1])
    good = w.ask(op="debug")["shared"]["file"]
    size = os.path.getsize(good)
    saved = open(good, "rb").read()
    w.close()  # the last process: it removes the file
    cases = {
        "garbage": lambda p: open(p, "wb").write(os.urandom(size)),
        "link": lambda p: os.symlink(os.path.join(sdir, "elsewhere"), p),
        "mode_0644": lambda p: (open(p, "wb").write(saved), os.chmod(p, 0o644)),
    }
    # a file of another size (an older bertfill's, or cut short) that no
    # process is attached to: replaced by a new one, batching stays on
    for name, make in (("truncated", lambda p: open(p, "wb").write(saved[:size // 2])),
                       ("older_version", lambda p: open(p, "wb").write(saved + bytes(4096)))):
        make(good)
        os.chmod(good, 0o600)
        w = Worker(env)
        r = w.ask(op="run", texts=texts)
        d = w.ask(op="debug")
        now = os.path.getsize(good) if os.path.exists(good) else -1
        err = w.close()
        wrong = count_wrong([r], texts, ref)
        check("replaced_" + name,
              wrong == 0 and not r["errors"] and d["shared"]["usable"] and now == size and
              "shared batching off" not in err and not os.path.exists(good),
              "wrong %d, errors %r, shared %r, size %d, stderr %r" % (wrong, r["errors"], d["shared"],
                                                                    now, err[-300:]))
    for name, make in cases.items():
        if os.path.lexists(good):
            os.unlink(good)
        make(good)
        if name != "mode_0644" and name != "link":
            os.chmod(good, 0o600)
        w = Worker(env)
        r = w.ask(op="run", texts=texts)
        d = w.ask(op="debug")
        err = w.close()
        wrong = count_wrong([r], texts, ref)
        check("refused_" + name,
              wrong == 0 and not r["errors"] and not d["shared"]["usable"] and
              err.count("shared batching off") == 1,
              "wrong %d, errors %r, shared %r, stderr %r" % (wrong, r["errors"], d["shared"],
                                                             err[-300:]))
        os.unlink(good)
    shutil.rmtree(sdir, ignore_errors=True)


def test_full_queue():
    texts = make_texts(6, seed=81)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir)
    w = Worker(env)
    w.ask(op="run", texts=texts[:1])
    path = w.ask(op="debug")["shared"]["file"]
    slot_size, nslots, _, _ = read_header(path)
    size = os.path.getsize(path)
    # a live process holds every slot: its lock byte (a POSIX lock, which
    # conflicts with the OFD locks) and a state that is not FREE
    fd = os.open(path, os.O_RDWR)
    for i in range(nslots):
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, size + 64 + i, os.SEEK_SET)
    m = mmap.mmap(fd, 0)
    for i in range(nslots):
        struct.pack_into("<I", m, 4096 + i * slot_size, 1)  # FILLING
    r = w.ask(op="run", texts=texts)
    d = w.ask(op="debug")
    for i in range(nslots):
        struct.pack_into("<I", m, 4096 + i * slot_size, 0)
    m.close()
    os.close(fd)
    w.close()
    wrong = count_wrong([r], texts, ref)
    check("full_queue_falls_back",
          wrong == 0 and not r["errors"] and d["counters"]["shared_fallback"] >= len(texts),
          "wrong %d, errors %r, counters %r" % (wrong, r["errors"], d["counters"]))
    shutil.rmtree(sdir, ignore_errors=True)


def test_stalled_process():
    """A process whose encoder slots are all busy must not hold the lead
    while it waits for one: here A's only way to an encoder slot is the
    machine-wide guard, whose every slot this test holds, so A can never
    run its own encoder; B (no machine guard) must still answer at once."""
    texts = make_texts(12, seed=111)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    slots = os.path.join(sdir, "slots")
    fd = os.open(slots, os.O_RDWR | os.O_CREAT, 0o600)
    for i in range(1024):  # every slot byte (LOCK_BASE 4096, BFX_MACHINE_SLOTS_MAX)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 4096 + i, os.SEEK_SET)
    a = Worker(base_env(sdir, BERTFILL_MACHINE_GUARD=1, BERTFILL_MACHINE_GUARD_FILE=slots,
                        BERTFILL_BUSY_TIMEOUT_MS=3000))
    b = Worker(base_env(sdir, BERTFILL_BUSY_TIMEOUT_MS=2000))
    a.send(op="run", texts=texts[:2])
    time.sleep(0.2)  # A has posted and is looking for an encoder slot
    rb = b.ask(op="run", texts=texts[6:])
    ra = a.recv()
    os.close(fd)
    a.close()
    b.close()
    # B's answers all right and at once (when the lead was held while
    # waiting, B waited for A's busy timeout and failed); A's requests are
    # right where B ran them, and busy where no process could (A has no
    # encoder slot, and B stopped calling)
    wrong = sum(1 for r, tt in ((ra, texts[:2]), (rb, texts[6:]))
                for x, t in zip(r["answers"], tt) if x is not None and not same(x, ref[t]))
    check("stalled_process_does_not_stall_others",
          wrong == 0 and not rb["errors"] and rb["worst"] < 1.0
          and all(e.startswith("bertfill: busy:") for e in ra["errors"]),
          "wrong %d, B errors %r worst %.2f s, A errors %r" %
          (wrong, rb["errors"], rb["worst"], ra["errors"]))
    shutil.rmtree(sdir, ignore_errors=True)


def test_fork():
    texts = make_texts(30, seed=91)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_GATHER=2)
    w = Worker(env)
    w.ask(op="run", texts=texts[:1])  # the file opened before the fork
    before = w.ask(op="debug")["counters"]
    r = w.ask(op="fork", texts=texts)
    w.close()
    p, c = r["parent"], r["child"]
    wrong = count_wrong([p, c], texts, ref)
    served = (p["counters"]["shared_served"] + c["counters"]["shared_served"]
              - 2 * before["shared_served"])
    check("fork", wrong == 0 and not p["errors"] and not c["errors"] and c["shared"]["usable"]
          and served > 0,
          "wrong %d, errors %r %r, served %d, child %r" % (wrong, p["errors"], c["errors"], served,
                                                           c["shared"]))
    shutil.rmtree(sdir, ignore_errors=True)


def test_fork_child_lets_model_go():
    """A forked child holds no reference of the parent's lingering leader:
    once its last connection closes, the model is unmapped in the child."""
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    w = Worker(base_env(sdir, BERTFILL_SHARED_LINGER_MS=5000))
    w.ask(op="run", texts=make_texts(2, seed=93))  # the lead now lingers, holding the model
    lingering = w.ask(op="debug")["counters"]
    r = w.ask(op="fork_close")
    w.close()
    check("fork_child_lets_model_go", r["child_maps"] == [],
          "the child still maps %r after closing its connection (counters %r)" %
          (r["child_maps"], {k: v for k, v in lingering.items() if "lead" in k}))
    shutil.rmtree(sdir, ignore_errors=True)


def test_off():
    texts = make_texts(4, seed=101)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    w = Worker(base_env(sdir, BERTFILL_SHARED_BATCH=0))
    r = w.ask(op="run", texts=texts)
    d = w.ask(op="debug")
    w.close()
    wrong = count_wrong([r], texts, ref)
    check("off", wrong == 0 and not d["shared"]["on"] and not shared_files(sdir),
          "wrong %d, shared %r, files %r" % (wrong, d["shared"], shared_files(sdir)))
    shutil.rmtree(sdir, ignore_errors=True)


def test_fast_path():
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    on, off = Worker(base_env(sdir)), Worker(base_env(sdir, BERTFILL_SHARED_BATCH=0))
    text = "我们[MASK]去公园玩"
    best_on, best_off = 1e9, 1e9
    for _ in range(5):
        best_off = min(best_off, off.ask(op="time", text=text, n=300)["mean"])
        best_on = min(best_on, on.ask(op="time", text=text, n=300)["mean"])
    r_on, r_off = on.ask(op="run", texts=[text]), off.ask(op="run", texts=[text])
    d = on.ask(op="debug")
    on.close()
    off.close()
    # the answers and the path are checked; the time is reported, not asserted
    # (a test machine's timings are noise: the cost is measured in make load)
    check("fast_path_alone", same(r_on["answers"][0], r_off["answers"][0]) and d["shared"]["usable"]
          and d["counters"]["shared_remote"] == 0,
          "on %r off %r shared %r" % (r_on, r_off, d["shared"]))
    print("   (one process alone, tiny model, cache off: %.1f us per call with the shared queue, "
          "%.1f us without)" % (best_on * 1e6, best_off * 1e6))
    shutil.rmtree(sdir, ignore_errors=True)


# ---- issue 41: a full tmpfs, a writer of the queue file, a stopped leader ----

class LoopWorkers:
    """Workers that call forever (op loop), one answer line each: the test
    reads them as they come and counts right, wrong, errors and deaths."""

    def __init__(self, env, n, texts, ref):
        import selectors
        self.sel = selectors.DefaultSelector()
        self.ref, self.ws = ref, []
        for j in range(n):
            w = Worker(env)
            w.send(op="loop", texts=random.Random(w.pid + j).sample(texts, len(texts)))
            self.sel.register(w.p.stdout, selectors.EVENT_READ, w)
            self.ws.append(w)
        self.answered = {w.pid: 0 for w in self.ws}
        self.wrong, self.errors, self.died, self.worst = 0, [], [], 0.0

    def read(self, seconds, skip_pid=None):
        """Read answers for seconds; how many each worker gave meanwhile."""
        got = {w.pid: 0 for w in self.ws}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for key, _ in self.sel.select(timeout=0.02):
                w = key.data
                line = w.p.stdout.readline()
                if not line:  # a worker died: how
                    self.sel.unregister(w.p.stdout)
                    w.p.wait()
                    self.died.append("pid %d exit %d: %s" % (w.pid, w.p.returncode,
                                                              w.p.stderr.read()[-300:]))
                    continue
                r = json.loads(line)
                got[w.pid] += 1
                self.answered[w.pid] += 1
                if w.pid != skip_pid:
                    self.worst = max(self.worst, r["dt"])
                if r["err"]:
                    self.errors.append(r["err"])
                elif not same(r["answer"], self.ref[r["text"]]):
                    self.wrong += 1
        return got

    def close(self):
        for w in self.ws:
            if w.p.poll() is None:
                w.kill()
            w.close()


def shared_path(sdir, until=10.0):
    end = time.monotonic() + until
    while time.monotonic() < end:
        files = shared_files(sdir)
        if files:
            return os.path.join(sdir, files[0])
        time.sleep(0.01)
    return None


# Inside a mount namespace of its own: a small tmpfs, nearly full, holds the
# shared file.  argv: worker code, ext, model, mount point, texts (JSON).
# Prints one JSON line: for each case, each process's exit code, answers,
# stderr.
TMPFS_CASES = r"""
import json, os, subprocess, sys
worker, ext, model, mnt, texts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
def mount():
    subprocess.run(["umount", mnt], capture_output=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode:
        print(json.dumps({"cannot": "mount: " + r.stderr.strip()}), flush=True)
        sys.exit(0)
def fill(free_kb):
    st = os.statvfs(mnt)
    with open(os.path.join(mnt, "fill"), "wb") as f:
        f.write(b"\1" * (st.f_bavail * st.f_frsize - free_kb * 1024))
def run(n):
    ps = [subprocess.Popen([sys.executable, "-c", worker, ext, model, "fp32"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    for p in ps:
        p.stdin.write(json.dumps({"op": "run", "texts": texts}) + "\n")
        p.stdin.close()
    out = []
    for p in ps:
        lines = p.stdout.read().splitlines()
        p.wait()
        ans = json.loads(lines[-1]) if len(lines) > 1 else None
        out.append({"rc": p.returncode, "answers": ans and ans["answers"],
                    "errors": ans and ans["errors"], "stderr": p.stderr.read()})
    return out
res = {}
for name, free_kb in (("new_file_100k_free", 100), ("new_file_196k_free", 196)):
    mount()
    fill(free_kb)
    res[name] = run(1)
# a file made by another process (a bertfill before this fix: ftruncate
# only), its pages not there: only its header page written (read while
# the process that made it runs: its last process removes the file)
mount()
p = subprocess.Popen([sys.executable, "-c", worker, ext, model, "fp32"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
p.stdout.readline()
p.stdin.write(json.dumps({"op": "run", "texts": texts[:1]}) + "\n")
p.stdin.flush()
p.stdout.readline()
path = [os.path.join(mnt, f) for f in os.listdir(mnt) if "-batch-" in f][0]
head, size = open(path, "rb").read(4096), os.path.getsize(path)
p.stdin.close()
p.wait()
if os.path.exists(path):
    os.unlink(path)
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, head)
os.ftruncate(fd, size)
os.close(fd)
fill(196)
res["existing_sparse_file_196k_free"] = run(3)
subprocess.run(["umount", mnt], capture_output=True)
print(json.dumps(res), flush=True)
"""


def test_full_tmpfs():
    """Item 1 of issue 41: the queue's file system nearly full (a 4 MB
    tmpfs in a mount namespace of its own): no SIGBUS, right answers from
    the process's own batcher, one warning line."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        skip("full_tmpfs", "needs root and unshare (a tmpfs mounted in a namespace of its own)")
        return
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip("full_tmpfs", "mount namespaces or tmpfs mounts not allowed here: %s"
             % probe.stderr.strip()[-200:])
        return
    texts = make_texts(6, seed=121)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-tmpfs-")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                        TMPFS_CASES, WORKER, EXT, TINY, sdir, json.dumps(texts)],
                       capture_output=True, text=True, env=base_env(sdir), timeout=300)
    shutil.rmtree(sdir, ignore_errors=True)
    if r.returncode != 0 or not r.stdout.strip():
        check("full_tmpfs", False, "rc %d, stderr %r" % (r.returncode, r.stderr[-500:]))
        return
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "cannot" in res:
        skip("full_tmpfs", res["cannot"])
        return
    for name, procs in res.items():
        bad = [p for p in procs
               if p["rc"] != 0 or p["errors"] or p["answers"] is None or
               any(not same(a, ref[t]) for a, t in zip(p["answers"], texts)) or
               p["stderr"].count("shared batching off") != 1 or
               "No space left on device" not in p["stderr"]]
        check("full_tmpfs_" + name, not bad,
              "%d of %d processes: %r" % (len(bad), len(procs),
                                          [(p["rc"], p["errors"], p["stderr"][-200:])
                                           for p in bad][:2]))


# A same-user process that writes the queue file while others use it.
# argv: path, mode (n: flips n of waiting slots between 3 and 0x100000;
# done: marks waiting slots DONE, with their ticket and without), seconds.
SLOT_WRITER = r"""
import mmap, struct, sys, time
path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), 0)
slot_size, nslots = struct.unpack_from("<II", m, 16)
at = [4096 + i * slot_size for i in range(nslots)]
end, writes, rounds = time.monotonic() + seconds, 0, 0
while time.monotonic() < end:
    rounds += 1
    live = [a for a in at if struct.unpack_from("<I", m, a)[0] & 0xF in (2, 3, 5)]
    if mode == "n":
        for _ in range(200):
            for a in live:
                struct.pack_into("<I", m, a + 4, 3)
                struct.pack_into("<I", m, a + 4, 0x100000)
                writes += 2
        for a in live:
            struct.pack_into("<I", m, a + 4, 3)
    else:
        for a in live:
            w = struct.unpack_from("<I", m, a)[0]
            struct.pack_into("<I", m, a, (w & ~0xF | 4) if rounds % 2 else 4)
            writes += 1
print(writes, flush=True)
"""


def test_slot_writer():
    """Item 3 of issue 41: a process of the same user writes the slots of the
    queue file while 4 processes call: no process crashes, every answer is
    a lone process's (a damaged request is computed by its own process)."""
    texts = make_texts(40, seed=131)
    ref = dict(zip(texts, references(texts)))
    for mode, what in (("n", "n flipped between 3 and 0x100000"),
                       ("done", "waiting slots marked DONE")):
        sdir = tempfile.mkdtemp(prefix="bf-sb-")
        lw = LoopWorkers(base_env(sdir), 4, texts, ref)
        path = shared_path(sdir)
        lw.read(0.3)
        writer = subprocess.Popen([sys.executable, "-c", SLOT_WRITER, path, mode, "4"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lw.read(4.5)
        out, err = writer.communicate(timeout=30)
        lw.read(0.5)  # and after it: still right
        lw.close()
        answered = sum(lw.answered.values())
        check("slot_writer_" + mode,
              not lw.died and not lw.errors and lw.wrong == 0 and answered > 0 and
              out.strip().isdigit() and int(out) > 0,
              "%s: %d answers, %d wrong, errors %r, died %r, writer %r %r" %
              (what, answered, lw.wrong, lw.errors[:2], lw.died[:2], out[-100:], err[-300:]))
        print("   (%s: %s writes, %d answers of 4 processes, %d wrong)"
              % (what, out.strip(), answered, lw.wrong))
        shutil.rmtree(sdir, ignore_errors=True)


def test_stopped_leader():
    """Item 4 of issue 41: the leader is stopped (SIGSTOP) with a batch
    TAKEN while 4 other processes call: their calls keep answering, right
    and without an error, while it is stopped (3 busy timeouts); after
    SIGCONT its late writes damage nothing and everyone answers right."""
    texts = make_texts(40, seed=141)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    busy_ms = 1000
    lw = LoopWorkers(base_env(sdir, BERTFILL_BUSY_TIMEOUT_MS=busy_ms), 5, texts, ref)
    path = shared_path(sdir)
    pids = set(lw.answered)
    victim, until = None, time.monotonic() + 20
    while victim is None and time.monotonic() < until:
        lw.read(0.002)
        _, _, leader, states = read_header(path)
        if leader in pids and TAKEN in states:
            os.kill(leader, signal.SIGSTOP)
            _, _, leader2, states = read_header(path)
            if leader2 == leader and TAKEN in states:
                victim = leader
            else:
                os.kill(leader, signal.SIGCONT)
    if victim is None:
        lw.close()
        check("stopped_leader", False, "never saw a leader with a batch TAKEN")
        return
    during = lw.read(3 * busy_ms / 1000.0, skip_pid=victim)
    worst_stopped = lw.worst
    errors_stopped = list(lw.errors)
    os.kill(victim, signal.SIGCONT)
    after = lw.read(2.0)
    lw.close()
    slow = {p: n for p, n in during.items() if p != victim and n < 2}
    check("stopped_leader_others_answer",
          not slow and not errors_stopped and not lw.died,
          "answers of each other process while the leader was stopped %r (each needs 2), "
          "errors %r, died %r" % ({p: n for p, n in during.items() if p != victim},
                                  errors_stopped[:2], lw.died[:2]))
    check("stopped_leader_after_sigcont",
          lw.wrong == 0 and not lw.errors and not lw.died and after.get(victim, 0) > 0 and
          all(n > 0 for n in after.values()),
          "%d wrong, errors %r, answers after SIGCONT %r, died %r"
          % (lw.wrong, lw.errors[:2], after, lw.died[:2]))
    print("   (leader stopped %d s: %d answers of the 4 others, slowest call %.0f ms; busy "
          "timeout %d ms)" % (3 * busy_ms // 1000,
                              sum(n for p, n in during.items() if p != victim),
                              worst_stopped * 1000, busy_ms))
    shutil.rmtree(sdir, ignore_errors=True)


def test_busy_message():
    """Item 4 of issue 41: a request that no batch takes within the busy
    timeout while another process leads (and is busy, not stalled: its
    batch announced a long run) fails with a message that names what it
    waited for: the machine-wide queue and the leading process."""
    texts = make_texts(2, seed=151)
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    a = Worker(base_env(sdir, BERTFILL_SHARED_HOLD_MS=2500))
    # B keeps no lead after its call (LINGER), so that A's batch is A's
    b = Worker(base_env(sdir, BERTFILL_BUSY_TIMEOUT_MS=500, BERTFILL_SHARED_LINGER_MS=0))
    b.ask(op="run", texts=texts[1:])  # the file exists
    path = shared_path(sdir)
    a.send(op="run", texts=texts[:1])
    until = time.monotonic() + 5
    while time.monotonic() < until:
        _, _, leader, states = read_header(path)
        if leader == a.pid and TAKEN in states:
            break
        time.sleep(0.005)
    rb = b.ask(op="run", texts=texts[1:])
    # B's request, taken back at its busy timeout (A still runs its batch):
    # its token ids are gone from the file (issue 40, item 4)
    _, _, data = slot_data(path)
    found = texts_in(data, token_ids(texts[1:]))
    ra = a.recv()
    a.close()
    b.close()
    err = rb["errors"][0] if rb["errors"] else ""
    check("busy_taken_back_cleared", rb["errors"] and found == 0,
          "B's errors %r; its text's token ids in the file: %d" % (rb["errors"], found))
    want = (r"bertfill: busy: waited (\d+) ms in the machine-wide queue of this model: "
            r"0 other requests waiting, 1 in the batch that process %d is running" % a.pid)
    m = re.fullmatch(want, err)
    check("busy_message_names_queue",
          m is not None and 450 <= int(m.group(1)) < 2500 and not ra["errors"],
          "B's errors %r (A is %d), A's errors %r" % (rb["errors"], a.pid, ra["errors"]))
    print("   (%s)" % err)
    shutil.rmtree(sdir, ignore_errors=True)


# ---- issue 38, item 3: a leader that keeps the lead ----

def test_linger():
    """Item 3 of issue 38 (LINGER in shared_batch.c): a leader keeps the
    lead after its call, in a thread of its own, and runs other processes'
    requests (lead "kept"); its process's own next call leads itself at
    once; with no request for the linger time the lead is free again; a
    lingering leader SIGKILLed, idle or in the middle of a kept batch, or
    SIGSTOPped, keeps nobody waiting beyond the stall rule (no error)."""
    texts = make_texts(16, seed=171)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    linger = dict(BERTFILL_SHARED_LINGER_MS=1000)
    b = Worker(base_env(sdir, BERTFILL_SHARED_LINGER_MS=0, BERTFILL_BUSY_TIMEOUT_MS=5000))

    def traced(w, ts):
        r = w.ask(op="traced", texts=ts)["calls"]
        return r, all(c[0] == ref[t][0] and c[4] is None for c, t in zip(r, ts))

    def leads(r):
        return [(c[2], c[3]) for c in r]
    a = Worker(base_env(sdir, **linger))
    traced(a, texts[:1])  # A leads, then keeps the lead
    rb, ok = traced(b, texts[1:3])
    check("linger_kept", ok and leads(rb) == [(a.pid, "kept")] * 2,
          "B's calls while A lingers: right %s, (leader, lead) %r (A is %d)" % (ok, leads(rb), a.pid))
    ra, ok = traced(a, texts[3:4])
    check("linger_own_call_leads", ok and leads(ra) == [(a.pid, "post")] and ra[0][1] < 2.0,
          "A's own call while its thread lingers: right %s, (leader, lead) %r, %.0f ms"
          % (ok, leads(ra), ra[0][1] * 1000))
    time.sleep(1.5)  # the linger time without a request: the lead is free
    rb, ok = traced(b, texts[4:5])
    check("linger_gives_up", ok and leads(rb) == [(b.pid, "post")],
          "B's call 1.5 s later: right %s, (leader, lead) %r (B is %d)" % (ok, leads(rb), b.pid))
    traced(a, texts[5:6])
    a.kill()  # killed while lingering: its lock dies with it
    rb, ok = traced(b, texts[6:8])
    check("linger_sigkill_idle", ok and leads(rb) == [(b.pid, "post")] * 2,
          "B's calls after A was killed lingering: right %s, (leader, lead) %r (B is %d)"
          % (ok, leads(rb), b.pid))
    # killed in the middle of a kept batch (the hold hook: 400 ms between
    # taking and running): B's request is run again, by B, in time
    a = Worker(base_env(sdir, BERTFILL_SHARED_HOLD_MS=400, **linger))
    traced(a, texts[8:9])
    path = shared_path(sdir)
    b.send(op="traced", texts=texts[9:10])
    until, seen = time.monotonic() + 5, False
    while not seen and time.monotonic() < until:
        _, _, leader, states = read_header(path)
        seen = leader == a.pid and TAKEN in states
        time.sleep(0.002)
    a.kill()
    rb = b.recv()["calls"]
    ok = rb[0][0] == ref[texts[9]][0] and rb[0][4] is None
    check("linger_sigkill_in_batch", seen and ok and rb[0][2] == b.pid and rb[0][1] < 2.0,
          "A's kept batch seen TAKEN %s; B: right %s, (leader, lead) %r, %.0f ms"
          % (seen, ok, leads(rb), rb[0][1] * 1000))
    killed_ms = rb[0][1] * 1000
    # stopped while lingering: B waits for the stall rule, not its busy timeout
    a = Worker(base_env(sdir, **linger))
    traced(a, texts[10:11])
    os.kill(a.pid, signal.SIGSTOP)
    rb, ok = traced(b, texts[11:13])
    os.kill(a.pid, signal.SIGCONT)
    worst = max(c[1] for c in rb)
    check("linger_sigstop", ok and worst < 1.0,
          "B's calls while A is stopped lingering: right %s, slowest %.0f ms (busy timeout 5000)"
          % (ok, worst * 1000))
    ra, ok = traced(a, texts[13:14])
    check("linger_after_sigcont", ok, "A's call after SIGCONT: %r" % ra)
    print("   (kept: B's calls led by A's lingering thread; after a SIGKILL in a kept batch B "
          "answered in %.0f ms; stopped: slowest %.0f ms)" % (killed_ms, worst * 1000))
    a.close()
    b.close()
    shutil.rmtree(sdir, ignore_errors=True)


# ---- issue 38, item 0: a herd ----

# Holds INIT_BYTE of the shared file (a POSIX lock: it conflicts with the
# OFD locks of the processes) until killed.  argv: path, offset.
INIT_HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(sys.argv[2]), os.SEEK_SET)
print("locked", flush=True)
time.sleep(600)
"""


def test_herd(n=int(os.environ.get("SB_HERD", "30"))):
    """Item 0 of issue 38: n processes spawned at once, each loading the
    model and calling at once, while a process that holds the file's init
    lock (as one that makes the file does) is stopped: their first calls,
    past the 1 s wait, run in their own processes; once the lock is free
    their next calls open the shared file (never given up for the
    process's life): all end usable, no error, no warning, right answers."""
    texts = make_texts(3 * n + 40, seed=191)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-herd-")
    env = base_env(sdir)
    w = Worker(env)  # the file's name and size, then it goes (the last leaver removes it)
    w.ask(op="run", texts=texts[:1])
    path = w.ask(op="debug")["shared"]["file"]
    size = os.path.getsize(path)
    w.close()
    holder = subprocess.Popen([sys.executable, "-c", INIT_HOLDER, path, str(size)],
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    os.kill(holder.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    ws = [Worker(env, wait=False) for _ in range(n)]
    for j, w in enumerate(ws):  # the first call queued before the model is even loaded
        w.send(op="run", texts=texts[3 * j:3 * j + 3])
    for w in ws:
        w.ready()
    first = [w.recv() for w in ws]
    during = [w.ask(op="debug")["shared"]["usable"] for w in ws]
    held = time.monotonic() - stopped
    os.kill(holder.pid, signal.SIGCONT)
    holder.kill()
    holder.wait()
    later, rounds, usable = [], 0, [False] * n
    until = time.monotonic() + 10
    while not all(usable) and time.monotonic() < until:
        rounds += 1
        for j, w in enumerate(ws):
            if not usable[j]:
                w.send(op="run", texts=texts[3 * n + rounds % 40:3 * n + rounds % 40 + 1])
        for j, w in enumerate(ws):
            if not usable[j]:
                later.append((w.recv(), texts[3 * n + rounds % 40:3 * n + rounds % 40 + 1]))
                usable[j] = w.ask(op="debug")["shared"]["usable"]
    final = [w.ask(op="run", texts=texts[3 * j:3 * j + 3]) for j, w in enumerate(ws)]
    shared = [w.ask(op="debug") for w in ws]
    errs = [w.close() for w in ws]
    wrong = sum(count_wrong([r], texts[3 * j:3 * j + 3], ref)
                for rs in (first, final) for j, r in enumerate(rs))
    wrong += sum(count_wrong([r], t, ref) for r, t in later)
    errors = [e for r in first + final + [r for r, _ in later] for e in r["errors"]]
    warned = [e[-200:] for e in errs if "shared batching" in e]
    off_during = during.count(False)
    check("herd_held_lock_refused_first", off_during > 0,
          "the init lock held %.1f s by a stopped process: %d of %d processes had the file "
          "(none waited for it past 1 s?)" % (held, n - off_during, n))
    check("herd_all_usable_later",
          all(d["shared"]["usable"] for d in shared) and wrong == 0 and not errors and not warned,
          "usable %d of %d after %d later calls, %d wrong, errors %r, warnings %r"
          % (sum(d["shared"]["usable"] for d in shared), n, rounds, wrong, errors[:2], warned[:2]))
    print("   (%d processes, the init lock held %.1f s: %d had the file then, all %s after %d "
          "more call(s) each)" % (n, held, n - off_during,
                                  "usable" if all(usable) else "NOT usable", rounds))
    # and a herd with nobody stopped: every one of them on the shared file
    ws = [Worker(env, wait=False) for _ in range(n)]
    for j, w in enumerate(ws):
        w.send(op="run", texts=texts[3 * j:3 * j + 3])
    for w in ws:
        w.ready()
    res = [w.recv() for w in ws]
    shared = [w.ask(op="debug") for w in ws]
    errs = [w.close() for w in ws]
    wrong = sum(count_wrong([r], texts[3 * j:3 * j + 3], ref) for j, r in enumerate(res))
    errors = [e for r in res for e in r["errors"]]
    warned = [e[-200:] for e in errs if "shared batching" in e]
    check("herd_at_once_usable",
          all(d["shared"]["usable"] for d in shared) and wrong == 0 and not errors and not warned,
          "usable %d of %d, %d wrong, errors %r, warnings %r"
          % (sum(d["shared"]["usable"] for d in shared), n, wrong, errors[:2], warned[:2]))
    shutil.rmtree(sdir, ignore_errors=True)


# ---- issue 40, item 4: nothing left behind ----

def test_exit_cleanup():
    """Item 4 of issue 40: the queue file is removed when the last process
    using it exits (normally); while one still runs it stays and works."""
    texts = make_texts(20, seed=161)
    ref = dict(zip(texts, references(texts)))
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_GATHER=2)
    ws = [Worker(env) for _ in range(4)]
    for w in ws:
        w.send(op="run", texts=texts)
    res = [w.recv() for w in ws]
    while_all = shared_files(sdir)
    for w in ws[1:]:
        w.close()
    while_one = shared_files(sdir)
    # the one left still uses the file, and a process that comes now joins it
    late = Worker(env)
    ws[0].send(op="run", texts=texts)
    late.send(op="run", texts=texts)
    res += [ws[0].recv(), late.recv()]
    shared = [ws[0].ask(op="debug"), late.ask(op="debug")]
    late.close()
    ws[0].close()
    after = shared_files(sdir)
    wrong = count_wrong(res, texts, ref)
    errors = sum(len(r["errors"]) for r in res)
    served = sum(d["counters"]["shared_served"] for d in shared)
    same_file = len(set(d["shared"]["file"] for d in shared)) == 1
    check("exit_file_stays_while_one_runs",
          len(while_all) == 1 and while_one == while_all and wrong == 0 and errors == 0 and
          served > 0 and same_file and all(d["shared"]["usable"] for d in shared),
          "files with 4 %r, with 1 %r, %d wrong, %d errors, served %d, files %r" %
          (while_all, while_one, wrong, errors, served, [d["shared"]["file"] for d in shared]))
    check("exit_no_file_left", len(while_all) == 1 and after == [],
          "files after the last process exited: %r" % after)
    # a herd: processes that start at once and exit at once
    left, wrong = [], 0
    for rnd in range(5):
        ws = [Worker(env) for _ in range(6)]
        for w in ws:
            w.send(op="run", texts=texts[rnd::5])
        res = [w.recv() for w in ws]
        wrong += count_wrong(res, texts[rnd::5], ref) + sum(len(r["errors"]) for r in res)
        for w in ws:
            w.p.stdin.close()
        for w in ws:
            w.p.wait(30)
            w.close()
        left += shared_files(sdir)
    check("exit_herd_no_file_left", not left and wrong == 0,
          "files left after rounds of 6 processes exiting at once: %r; %d wrong or errors"
          % (left, wrong))
    shutil.rmtree(sdir, ignore_errors=True)


def test_slot_texts_cleared():
    """Item 4 of issue 40: a slot's token ids and results are cleared once
    its answer is taken (the file read while both processes stay attached)."""
    texts = make_texts(16, seed=171)
    ref = dict(zip(texts, references(texts)))
    ids = token_ids(texts)
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    env = base_env(sdir, BERTFILL_SHARED_GATHER=2)
    a, b = Worker(env), Worker(env)
    a.send(op="run", texts=texts)
    b.send(op="run", texts=texts[::-1])
    ra, rb = a.recv(), b.recv()
    da, db = a.ask(op="debug"), b.ask(op="debug")
    states, dirty, data = slot_data(da["shared"]["file"])
    found = texts_in(data, ids)
    a.close()
    b.close()
    wrong = count_wrong([ra], texts, ref) + count_wrong([rb], texts[::-1], ref)
    served = da["counters"]["shared_served"] + db["counters"]["shared_served"]
    check("slot_texts_cleared",
          wrong == 0 and not ra["errors"] and not rb["errors"] and served > 0 and
          not dirty and found == 0 and all(s == 0 for s in states),
          "%d wrong, served %d; slots with ids or results left %r, %d of %d texts' ids in the "
          "file, states %r" % (wrong, served, dirty[:8], found, len(texts),
                               sorted(set(states))))
    shutil.rmtree(sdir, ignore_errors=True)


def test_sigkill_cleanup():
    """Item 4 of issue 40: processes SIGKILLed (with requests in flight)
    cannot leave the file; the next process clears what they left in it and
    removes it when it exits."""
    texts = make_texts(12, seed=181)
    ref = dict(zip(texts, references(texts)))
    ids = token_ids(texts)
    sdir = tempfile.mkdtemp(prefix="bf-sb-")
    ws = [Worker(base_env(sdir, BERTFILL_SHARED_HOLD_MS=400, BERTFILL_SHARED_GATHER=3))
          for _ in range(3)]
    ws[0].ask(op="run", texts=texts[:1])  # the file exists
    path = shared_path(sdir)
    for j, w in enumerate(ws):
        w.send(op="run", texts=texts[j::3])
    seen, until = [], time.monotonic() + 5
    while time.monotonic() < until:  # killed with a batch TAKEN (in flight)
        _, _, _, states = read_header(path)
        if states.count(TAKEN) >= 2:
            seen = states
            break
        time.sleep(0.005)
    for w in ws:
        w.kill()
        w.close()
    _, dirty_before, data = slot_data(path)
    left = shared_files(sdir)
    n = Worker(base_env(sdir))
    r = n.ask(op="run", texts=texts)
    _, dirty, data = slot_data(path)  # while it runs, after its calls answered
    found = texts_in(data, ids)
    d = n.ask(op="debug")
    n.close()
    after = shared_files(sdir)
    wrong = count_wrong([r], texts, ref)
    check("sigkill_file_left_then_removed",
          seen and left and after == [] and wrong == 0 and not r["errors"],
          "%d requests in flight at the kill, files after the kill %r, after the next process "
          "%r, %d wrong, errors %r" % (len(seen) - seen.count(0), left, after, wrong,
                                       r["errors"][:2]))
    check("sigkill_slots_cleared", dirty_before and not dirty and found == 0 and
          d["counters"]["shared_reclaimed"] >= 1,
          "slots with texts after the kill %r, while the next process runs %r, %d texts' ids "
          "in the file, counters %r" % (dirty_before[:8], dirty[:8], found, d["counters"]))
    shutil.rmtree(sdir, ignore_errors=True)


def main():
    if not os.path.exists(TINY) or not os.path.exists(SMALL):
        skip("shared_batch", "no test models (make models)")
        return 0
    only = sys.argv[1:]
    tests = [test_off, test_fast_path, test_same_answers, test_rerun_counted, test_leader_kill,
             test_requester_kill, test_models_precisions, test_other_user, test_refused_files,
             test_full_queue, test_stalled_process, test_fork, test_fork_child_lets_model_go, test_full_tmpfs,
             test_slot_writer,
             test_stopped_leader, test_busy_message, test_herd, test_exit_cleanup,
             test_slot_texts_cleared, test_sigkill_cleanup, test_linger]
    for t in tests:
        if only and t.__name__[5:] not in only:
            continue
        t0 = time.monotonic()
        try:
            t()
        except Exception as e:  # a test that crashes is a failure, not the end of the suite
            check(t.__name__[5:], False, "%s: %s" % (type(e).__name__, e))
        print("   (%s: %.1f s)" % (t.__name__[5:], time.monotonic() - t0))
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
