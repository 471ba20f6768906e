"""``benchmarks.engine_fill`` runs RocksDB's own ``db_bench`` with a replay's options and refuses a fill it did not
see happen."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks import engine_fill
from benchmarks.engine_fill import EngineFillError, Fill

FILL = Fill(
    keys=20_000, key_size=13, value_size=100, random_order=True, write_buffer_size=1 << 20, write_buffers=3, batch=500
)


@pytest.mark.parametrize("random_order", [True, False])
def test_db_bench_fills_every_key_natively_and_reports_its_wall_and_cpu_seconds(tmp_path, random_order):
    fill = Fill(**{**FILL.__dict__, "random_order": random_order})
    seconds, cpu = engine_fill.engine_fill(fill, tmp_path / "db")
    assert seconds > 0 and cpu > 0
    assert not (tmp_path / "db").exists(), "the filled database is removed"


def test_a_replay_in_random_order_is_mirrored_by_a_vector_memtable_and_the_bulk_loads_background_jobs(tmp_path):
    arguments = engine_fill.command("db_bench", FILL, tmp_path)
    assert "--benchmarks=filluniquerandom" in arguments and "--memtablerep=vector" in arguments
    assert f"--max_background_jobs={engine_fill.BULK_LOAD_BACKGROUND_JOBS}" in arguments
    assert {"--disable_wal=1", "--num=20000", "--key_size=13", "--write_buffer_size=1048576"} <= set(arguments)
    in_order = engine_fill.command("db_bench", Fill(**{**FILL.__dict__, "random_order": False}), tmp_path)
    assert "--benchmarks=fillseq" in in_order and "--memtablerep=skip_list" in in_order


def test_keys_that_are_not_a_multiple_of_the_batch_are_all_filled_in_smaller_batches(tmp_path):
    """db_bench writes whole batches only: 3,500 keys in batches of 1,000 would fill 3,000 (and raise)."""
    fill = Fill(**{**FILL.__dict__, "keys": 3_500, "batch": 1_000})
    assert "--batch_size=500" in engine_fill.command("db_bench", fill, tmp_path)
    assert engine_fill.engine_fill(fill, tmp_path / "db")[0] > 0


def test_a_fill_db_bench_did_not_report_or_that_failed_raises_with_its_output(tmp_path, monkeypatch):
    with pytest.raises(EngineFillError, match="no fillseq line"):
        engine_fill.operations("fillrandom   :  0.4 micros/op; 10 operations;", "fillseq")
    assert (
        engine_fill.operations(
            "fillseq      :       0.342 micros/op 2920722 ops/sec 0.342 seconds 1000000 operations;  314.8 MB/s",
            "fillseq",
        )
        == 1_000_000
    )
    monkeypatch.setattr(
        engine_fill,
        "command",
        lambda program, fill, directory: [program, "--benchmarks=nosuchbench", "--db=" + str(directory)],
    )
    with pytest.raises(EngineFillError):
        engine_fill.engine_fill(FILL, tmp_path / "db")


def test_no_db_bench_anywhere_is_said_with_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.delenv(engine_fill.ENVIRONMENT, raising=False)
    monkeypatch.setattr(engine_fill, "CACHE", tmp_path / "empty-cache")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(engine_fill.DbBenchMissingError, match=r"benchmarks\.engine_fill fetch"):
        engine_fill.db_bench()


def test_a_debs_depends_field_gives_the_first_of_each_alternative_without_versions_or_architectures():
    field = "libc6 (>= 2.34), libfoo1 | libbar1, libbaz:any (>= 1), zlib1g (>= 1:1.2.0)\n"
    assert engine_fill.parse_depends(field) == ["libc6", "libfoo1", "libbaz", "zlib1g"]


@pytest.mark.parametrize("triplet", ["x86_64-linux-gnu", "aarch64-linux-gnu"])
def test_a_fetched_program_loads_its_libraries_from_the_cache_and_is_refused_naming_those_missing(tmp_path, triplet):
    """A program linked to a library only the cache holds (built here with cc, as a fetched package's is), in the
    multiarch directory of whichever architecture the packages were for."""
    libraries = tmp_path / "usr" / "lib" / triplet
    libraries.mkdir(parents=True)
    (tmp_path / "only.c").write_text("int only_in_the_cache(void) { return 36; }\n")
    (tmp_path / "main.c").write_text("int only_in_the_cache(void);\nint main(void) { return only_in_the_cache(); }\n")
    library = libraries / "libonlyinthecache.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "only.c")], check=True)
    program = tmp_path / "usr" / "bin" / "program"
    program.parent.mkdir(parents=True)
    linking = ["cc", "-o", str(program), str(tmp_path / "main.c"), f"-L{libraries}", "-lonlyinthecache"]
    subprocess.run(linking, check=True)
    engine_fill._check_loads(program, tmp_path)  # loads: the library is unpacked beside it
    library.unlink()
    with pytest.raises(engine_fill.DbBenchMissingError, match=r"cannot load libonlyinthecache\.so"):
        engine_fill._check_loads(program, tmp_path)
