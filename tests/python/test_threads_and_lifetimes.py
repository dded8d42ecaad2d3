"""Threads launching at once, the GIL released while a kernel runs, and
objects freed in any order (as Python's collector frees them)."""
import gc
import threading
import time
import weakref

import numpy as np
import pytest
import torch

import tpk

SOURCE = "kernel scale(x: f32[M, N], a: f32) -> (y: f32[M, N]) { y = x * a; }"


def run_threads(n, work):
    """Run work(i) on n threads started together; re-raise the first failure."""
    errors, start = [], threading.Barrier(n)

    def body(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_eight_threads_launch_at_once():
    prog = tpk.load_source(SOURCE, name="scale.tpk")
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((8 + i, 16 * (i % 3 + 1))).astype(np.float32) for i in range(8)]
    results = [[] for _ in range(8)]

    def work(i):
        device = "sim:v5e" if i % 2 else "host"
        x = inputs[i]
        for round in range(30):
            y = prog.scale(x, float(round), device=device)          # the NumPy call, shared kernels
            soft = np.empty_like(x)
            report = tpk.std.softmax.launch([x, soft], device=device)  # the low-level one
            assert report.device == device and report.simulated == (device != "host")
            t = torch.from_numpy(x)
            out = torch.empty_like(t)
            tpk.std.softmax.launch([t, out])
            results[i].append((round, y, soft, out.numpy()))

    run_threads(8, work)
    for i, x in enumerate(inputs):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        assert len(results[i]) == 30
        for round, y, soft, out in results[i]:
            assert np.array_equal(y, x * np.float32(round))
            np.testing.assert_allclose(soft, ref, rtol=1e-5, atol=1e-7)
            assert np.array_equal(out, soft)


def test_threads_load_programs_and_read_reports():
    def work(i):
        prog = tpk.load_source(SOURCE.replace("scale", f"scale{i}"), name=f"scale{i}.tpk")
        kernel = getattr(prog, f"scale{i}")
        del prog
        x = np.full((4, 4), i, np.float32)
        for _ in range(20):
            assert (kernel(x, 2.0, device="sim:v5e") == 2 * i).all()
            assert kernel.last_report.seconds > 0

    run_threads(8, work)


def test_the_gil_is_released_while_a_kernel_runs():
    a = np.random.default_rng(5).standard_normal((1024, 1024)).astype(np.float32)
    c = np.empty_like(a)
    tpk.std.matmul.launch([a, a, c])  # built and warm
    started = time.perf_counter()
    tpk.std.matmul.launch([a, a, c])
    alone = time.perf_counter() - started
    done = threading.Event()
    ticks = 0

    def launch():
        for _ in range(3):
            tpk.std.matmul.launch([a, a, c])
        done.set()

    t = threading.Thread(target=launch)
    t.start()
    while not done.is_set():  # Python runs here while the kernels run there
        ticks += 1
    t.join()
    # a switch interval is 5 ms; holding the GIL for the launches would allow
    # about one tick per interval, not thousands
    assert alone > 0.005 and ticks > 1000, (alone, ticks)


def test_program_freed_before_its_kernel():
    prog = tpk.load_source(SOURCE, name="scale.tpk")
    kernel = prog.scale
    program_object = kernel.program
    alive = weakref.ref(program_object)
    del prog, program_object
    gc.collect()
    assert alive() is not None  # the kernel holds its program
    x = np.ones((3, 3), np.float32)
    assert (kernel(x, 3.0) == 3).all()
    del kernel
    gc.collect()
    assert alive() is None


def test_report_after_its_program_and_kernel(tmp_path):
    prog = tpk.load_source(SOURCE, name="scale.tpk")
    x = np.ones((64, 64), np.float32)
    prog.scale(x, 2.0, device="sim:v5e")
    report = prog.scale.last_report
    launched = prog.scale.launch([x, 2.0, np.empty_like(x)], device="sim:v5e")
    del prog
    gc.collect()
    for r in (report, launched):
        assert r.seconds > 0
        r.write_trace(str(tmp_path / "t.json"))  # the trace is the program's memory: still there
        assert (tmp_path / "t.json").stat().st_size > 0
    del report
    gc.collect()
    std_report = tpk.std.softmax.launch([x, np.empty_like(x)], device="sim:v5e")
    std_report.write_trace(str(tmp_path / "std.json"))


def test_odd_orders_many_times():
    x = torch.ones(5, 5)
    keep = []
    for i in range(200):
        prog = tpk.load_source(SOURCE, name="scale.tpk")
        kernel = prog.scale
        y = torch.empty(5, 5)
        report = kernel.launch([x, float(i), y])
        assert (y == i).all()
        order = [prog, kernel, report]
        if i % 3 == 1:
            order.reverse()
        elif i % 3 == 2:
            keep.append(report)  # reports outlive everything else
            order.remove(report)
        while order:
            order.pop(i % len(order))
        del prog, kernel, report
        if i % 50 == 0:
            gc.collect()
    assert all(r.kernel == "scale" for r in keep)
    keep.clear()
    gc.collect()


def test_arrays_are_released_after_a_launch():
    x = np.ones((8, 8), np.float32)
    y = np.empty_like(x)
    t, u = torch.ones(8, 8), torch.empty(8, 8)
    refs = [weakref.ref(o) for o in (t, u)]
    for _ in range(5):
        tpk.std.softmax.launch([x, y])
        tpk.std.softmax.launch([t, u])
        tpk.std.softmax(x, y)
    y.resize((4, 16), refcheck=False)  # no buffer export left behind
    del t, u
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_failed_launch_keeps_nothing():
    x = np.ones((8, 8), np.float32)
    for bad in ([x, np.ones((8, 9), np.float32)], [x, torch.empty(8, 8, dtype=torch.float64)], [x, "y"]):
        with pytest.raises((TypeError, ValueError)):
            tpk.std.softmax.launch(bad)
    x.resize((4, 16), refcheck=False)  # the failed launches released its buffer


def _forked_child(queue, a, c_ref):
    try:
        c = tpk.std.matmul(a, a)  # the parent's pool threads are not in this process
        scaled = tpk.load_source(SOURCE, name="scale.tpk").scale(a, 2.0, device="sim:v5e")
        queue.put(bool(np.array_equal(c, c_ref) and np.array_equal(scaled, 2 * a)))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent
        queue.put(repr(e))


def test_forked_processes_launch():
    """DataLoader workers are forked from a process that has launched."""
    import multiprocessing

    a = np.random.default_rng(9).standard_normal((300, 300)).astype(np.float32)
    c_ref = tpk.std.matmul(a, a)
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    children = [fork.Process(target=_forked_child, args=(queue, a, c_ref)) for _ in range(3)]
    for child in children:
        child.start()
    results = [queue.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
    assert results == [True] * 3
