"""Both harnesses take the KeyedProcessOptions a job passes to keyed_process: its key groups, state backend, RocksDB
options and job parameters; a keyword argument that disagrees with the options is refused before anything runs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from keyedstate import KeyedCoProcessFunction, KeyedProcessFunction, RocksDBOptions, Types, ValueStateDescriptor
from keyedstate.errors import ConfigurationError
from keyedstate.keygroups import key_group_of_key
from keyedstate.spark import KeyedProcessOptions
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend
from keyedstate.testing import KeyedCoProcessHarness, KeyedProcessHarness

TOTAL = ValueStateDescriptor("total", Types.LONG())


class ThresholdAlert(KeyedProcessFunction):
    """Sums each key's amounts; emits (key, total) once the total reaches the job parameter ``threshold``."""

    def open(self, runtime_context):
        self.threshold = int(runtime_context.get_job_parameter("threshold", "7"))
        self.total = runtime_context.get_state(TOTAL)

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value["amount"]
        self.total.update(total)
        if total >= self.threshold:
            yield ctx.get_current_key(), total


class JoinParameter(KeyedCoProcessFunction):
    """Tags every element of either input with the job parameter ``tag``."""

    def open(self, runtime_context):
        self.tag = runtime_context.get_job_parameter("tag")

    def process_element1(self, value, ctx):
        yield self.tag, 1, value["id"]

    def process_element2(self, value, ctx):
        yield self.tag, 2, value["id"]


def amounts(harness):
    for user, amount in [("a", 4), ("b", 7), ("a", 3), ("c", 1), ("b", 2)]:
        harness.process_element({"user": user, "amount": amount})
    return harness.extract_output()


def test_job_parameters_reach_the_function_in_the_one_input_harness():
    options = KeyedProcessOptions(job_parameters={"threshold": "3"})
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], options=options) as harness:
        assert amounts(harness) == [("a", 4), ("b", 7), ("a", 7), ("b", 9)]
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"]) as harness:
        assert amounts(harness) == [("b", 7), ("a", 7), ("b", 9)]  # no options: the function's default threshold


def test_job_parameters_reach_the_function_in_the_two_input_harness():
    options = KeyedProcessOptions(job_parameters={"tag": "prod"})
    with KeyedCoProcessHarness(JoinParameter(), lambda o: o["id"], lambda p: p["id"], options=options) as harness:
        harness.process_element1({"id": 1})
        harness.process_element2({"id": 2})
        assert harness.extract_output() == [("prod", 1, 1), ("prod", 2, 2)]


def test_the_options_rocksdb_backend_is_created_with_the_options_rocksdb_options(tmp_path):
    tuned = RocksDBOptions(block_size_bytes=8 * 1024, compression="zstd")
    options = KeyedProcessOptions(state_backend="rocksdb", rocksdb_options=tuned, num_key_groups=16)
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], options=options,
                             checkpoint_dir=str(tmp_path)) as harness:
        assert isinstance(harness.backend, RocksDBKeyedStateBackend)
        assert harness.backend.options == tuned
        amounts(harness)
        snapshot = harness.snapshot()
    assert snapshot.backend_kind == "rocksdb" and snapshot.num_key_groups == 16
    restored = KeyedProcessHarness.restore(ThresholdAlert(), lambda e: e["user"], snapshot, options=options)
    try:
        assert isinstance(restored.backend, RocksDBKeyedStateBackend) and restored.backend.options == tuned
        assert restored.state("a", TOTAL).value() == 7 and restored.state("b", TOTAL).value() == 9
    finally:
        restored.close()


def test_the_options_num_key_groups_decide_each_keys_key_group():
    keys = [f"user-{i}" for i in range(50)]
    with KeyedCoProcessHarness(JoinParameter(), lambda o: o["id"], lambda p: p["id"],
                               options=KeyedProcessOptions(num_key_groups=8)) as harness:
        assert harness.backend.num_key_groups == 8
        assert [harness.key_group_of_key(key) for key in keys] == [key_group_of_key(key, 8) for key in keys]
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"],
                             options=KeyedProcessOptions(num_key_groups=None)) as harness:
        assert harness.backend.num_key_groups == 128  # the options name no number: the harness's default


def test_a_harness_with_the_jobs_options_gives_what_the_keyword_arguments_give(backend_kind):
    def run(**settings):
        with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], **settings) as harness:
            output = amounts(harness)
            return output, harness.backend.backend_kind, set(harness.snapshot().rows)

    with_options = run(options=KeyedProcessOptions(num_key_groups=32, state_backend=backend_kind))
    assert with_options == run(backend=backend_kind, num_key_groups=32)
    assert with_options == ([("b", 7), ("a", 7), ("b", 9)], backend_kind, {key_group_of_key(u, 32) for u in "abc"})


@pytest.mark.parametrize("settings, message", [
    ({"backend": "heap", "options": KeyedProcessOptions(state_backend="rocksdb")},
     "backend='heap' disagrees with options.state_backend='rocksdb'"),
    ({"backend": "rocksdb", "options": KeyedProcessOptions()},
     "backend='rocksdb' disagrees with options.state_backend='heap'"),
    ({"num_key_groups": 8, "options": KeyedProcessOptions(num_key_groups=16)},
     "num_key_groups=8 disagrees with options.num_key_groups=16"),
])
def test_a_keyword_argument_disagreeing_with_the_options_is_refused_naming_both(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], **settings)
    with pytest.raises(ConfigurationError, match=message):
        KeyedCoProcessHarness(JoinParameter(), lambda o: o["id"], lambda p: p["id"], **settings)


def test_agreeing_keyword_arguments_and_a_backend_instance_of_the_options_kind_are_taken(tmp_path):
    options = KeyedProcessOptions(num_key_groups=16, state_backend="rocksdb")
    backend = RocksDBKeyedStateBackend(tmp_path / "db", num_key_groups=16)
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], backend=backend, num_key_groups=16,
                             options=options) as harness:
        assert harness.backend is backend
    with pytest.raises(ConfigurationError, match="backend='heap' disagrees with options.state_backend='rocksdb'"):
        KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], backend=HeapKeyedStateBackend(), options=options)
    tuned = dataclasses.replace(options, rocksdb_options=RocksDBOptions(block_size_bytes=8 * 1024))
    with pytest.raises(ConfigurationError, match="rocksdb_options tune the RocksDB backend the harness creates"):
        KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], backend=backend, options=tuned)


def test_restoring_under_options_of_other_key_groups_than_the_snapshot_is_refused():
    with KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], num_key_groups=8) as harness:
        amounts(harness)
        snapshot = harness.snapshot()
    with pytest.raises(ConfigurationError, match="num_key_groups=8 disagrees with options.num_key_groups=128"):
        KeyedProcessHarness.restore(ThresholdAlert(), lambda e: e["user"], snapshot, options=KeyedProcessOptions())


def test_the_deprecated_alias_is_checked_against_the_options_too():
    with pytest.warns(DeprecationWarning), pytest.raises(
            ConfigurationError, match="num_key_groups=8 disagrees with options.num_key_groups=16"):
        KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], max_parallelism=8,
                            options=KeyedProcessOptions(num_key_groups=16))


def test_options_of_another_type_and_unknown_keyword_arguments_are_refused():
    with pytest.raises(ConfigurationError, match="options must be a keyedstate.spark.KeyedProcessOptions, got dict"):
        KeyedProcessHarness(ThresholdAlert(), lambda e: e["user"], options={"num_key_groups": 8})
    with pytest.raises(TypeError, match="KeyedCoProcessHarness\\(\\) got an unexpected keyword argument 'backnd'"):
        KeyedCoProcessHarness(JoinParameter(), lambda o: o["id"], lambda p: p["id"], backnd="heap")


def test_a_harness_without_options_does_not_import_pyspark():
    script = ("import sys; from keyedstate.testing import KeyedProcessHarness; from keyedstate import "
              "KeyedProcessFunction\n"
              "class Echo(KeyedProcessFunction):\n"
              "    def process_element(self, value, ctx):\n"
              "        yield value\n"
              "with KeyedProcessHarness(Echo(), lambda e: e, backend='rocksdb') as harness:\n"
              "    harness.process_element(1)\n"
              "    assert harness.extract_output() == [1]\n"
              "print('pyspark' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
