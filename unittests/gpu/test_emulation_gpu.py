"""The emulated CUDA runtime catches what it claims to (docs/gpu_emulation.md): each kernel of
emulation/planted.cu runs correct, then with its planted bug, which must fail the launch with the right error and
a message that names it. Runs only under the emulation (PADDLE_EXT_GPU_EMULATE=1)."""

import ctypes
import functools
import pathlib

import numpy as np
import pytest

from gpu_runtime import BUILD, emulated

pytestmark = pytest.mark.skipif(not emulated(), reason="checks of the emulated runtime (PADDLE_EXT_GPU_EMULATE=1)")

ILLEGAL_ADDRESS, ILLEGAL_INSTRUCTION, LAUNCH_FAILURE = 700, 715, 719


@functools.lru_cache(maxsize=None)
def planted():
    from emulation import emulate
    lib = ctypes.CDLL(str(emulate.build(BUILD.parent / "gpu_emulated", [emulate.HERE / "planted.cu"],
                                        name="libpe_emu_planted")))
    lib.pe_emu_last_fault.restype = ctypes.c_char_p
    return lib


def launch(name, threads, bug):
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, size=threads + 1).astype(np.int32)
    out = np.zeros(threads + 1, dtype=np.int32)
    lib = planted()
    code = getattr(lib, f"pe_planted_{name}")(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                                              bug)
    return code, x[:threads], out[:threads], lib.pe_emu_last_fault().decode()


def test_block_scan_with_its_barriers_scans():
    code, x, out, _ = launch("hillis_steele_scan", 256, 0)
    assert code == 0
    np.testing.assert_array_equal(out, np.cumsum(x))


def test_block_scan_missing_a_barrier_is_a_race():
    code, _, _, fault = launch("hillis_steele_scan", 256, 1)
    assert code == LAUNCH_FAILURE
    assert "shared-memory race on buf+" in fault and "planted.cu" in fault and "no __syncthreads in between" in fault


def test_cub_scans_separated_by_a_barrier():
    code, x, out, _ = launch("cub_scan_twice", 256, 0)
    assert code == 0
    inclusive = np.cumsum(x)
    np.testing.assert_array_equal(out, np.concatenate([[0], np.cumsum(inclusive)[:-1]]))


def test_cub_temp_storage_reused_without_a_barrier_is_a_race():
    code, _, _, fault = launch("cub_scan_twice", 256, 1)
    assert code == LAUNCH_FAILURE
    assert "shared-memory race on temp+" in fault


def test_a_flag_stored_by_several_warps_is_no_race():
    code, x, out, _ = launch("shared_flag", 256, 0)
    assert code == 0 and len({t // 32 for t in np.flatnonzero(x < 0)}) > 1
    np.testing.assert_array_equal(out, np.ones(256, np.int32))


def test_warps_storing_different_values_race():
    code, _, _, fault = launch("shared_flag", 256, 1)
    assert code == LAUNCH_FAILURE
    assert "shared-memory race on flag+" in fault and "wrote another value" in fault
    # both stores named, each with the barrier its thread had passed when it stored
    assert fault.count("past the barrier at") == 2 and fault.count("planted.cu:82") == 2


def test_a_launch_after_a_fault_waits_for_the_synchronize_and_does_not_run():
    x = np.random.default_rng(0).integers(-50, 50, size=256).astype(np.int32)
    out = np.zeros(512, dtype=np.int32)
    lib = planted()
    code = lib.pe_planted_after_fault(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), 1)
    assert code == LAUNCH_FAILURE and not out[:256].any()
    code = lib.pe_planted_after_fault(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), 0)
    assert code == 0
    np.testing.assert_array_equal(out[:256], np.cumsum(x))


def test_warp_sum_with_a_full_mask():
    code, x, out, _ = launch("warp_sum", 64, 0)
    assert code == 0
    np.testing.assert_array_equal(out, np.repeat(x.reshape(2, 32).sum(axis=1), 32))


@pytest.mark.parametrize("bug, message", [
    (1, "mask 0x0000ffff"),  # lanes 0..15 read lanes their mask leaves out; lane 16 is not in its own mask
    (2, "reads lane 16, which has exited or does not exist (mask 0xffffffff)"),
])
def test_wrong_shuffle_mask_is_an_illegal_instruction(bug, message):
    code, _, _, fault = launch("warp_sum", 64, bug)
    assert code == ILLEGAL_INSTRUCTION
    assert message in fault and "__shfl_xor_sync (" in fault and "planted.cu" in fault


def test_warp_split_between_a_shuffle_and_a_barrier_deadlocks():
    assert launch("divergent_barrier", 64, 0)[0] == 0
    code, _, _, fault = launch("divergent_barrier", 64, 1)
    assert code == LAUNCH_FAILURE
    assert "deadlock" in fault and "32 thread(s) wait in __syncthreads" in fault
    assert "32 thread(s) wait in __shfl_sync mask 0xffffffff" in fault


def test_shared_index_out_of_bounds_is_an_illegal_address():
    code, x, out, _ = launch("shared_table", 64, 0)
    assert code == 0
    np.testing.assert_array_equal(out, 2 * np.roll(x, -1))
    code, _, _, fault = launch("shared_table", 64, 1)
    assert code == ILLEGAL_ADDRESS
    assert "index 64 out of bounds for type 'int [64]'" in fault


def test_spin_wait_that_never_ends_is_reported():
    code, x, out, _ = launch("spin", 64, 0)
    assert code == 0 and out[0] == x[0]
    code, _, _, fault = launch("spin", 64, 1)
    assert code == LAUNCH_FAILURE
    assert "spin-wait never ends" in fault


def test_the_library_keeps_working_after_a_fault():
    assert launch("hillis_steele_scan", 256, 1)[0] == LAUNCH_FAILURE
    code, x, out, _ = launch("hillis_steele_scan", 256, 0)
    assert code == 0
    np.testing.assert_array_equal(out, np.cumsum(x))
