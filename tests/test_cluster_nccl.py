"""nccl-tests output read and judged against the published bus bandwidth (issue 32), on real published logs
(tests/data/nccl/SOURCES.md): a healthy 8x H200 node, a 2-node H100 run (the tree trap), a degraded 3-node run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from estimator.cluster.nccl import NcclParseError, check_nccl, expected_busbw, parse_nccl_tests
from estimator.errors import InvalidRequestError
from hardware_catalog import Catalog, load_catalog

DATA = Path(__file__).parent / "data" / "nccl"
H200 = (DATA / "h200-8gpu-all-reduce-8g.txt").read_text()
A3 = (DATA / "h100-2node-a3mega-all-reduce.txt").read_text()
DEGRADED = (DATA / "h100-3node-nccl-1453-all-reduce-degraded.txt").read_text()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_parses_the_rows_devices_and_command_of_a_real_log() -> None:
    (run,) = parse_nccl_tests(A3)
    assert run.collective == "all_reduce"  # from the command line's all_reduce_perf
    assert run.ranks == 16 and run.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert run.gpu_name == "NVIDIA H100 80GB HBM3"
    assert len(run.rows) == 31 and run.rows[0][0] == 8 and run.rows[-1] == (8589934592, 180.71, 338.82)
    assert run.avg_busbw == pytest.approx(70.742) and not run.ring


def test_mpirun_output_tags_inside_rows_are_dropped() -> None:
    (run,) = parse_nccl_tests(DEGRADED)
    assert len(run.rows) == 10
    assert run.rows[1] == (2097152, 0.90, 9.65)  # the better of out-of-place 1.73 and in-place 9.65


def test_healthy_h200_node(catalog: Catalog) -> None:
    result = check_nccl(H200, catalog.server("nvidia-dgx-h200"), catalog)
    (t,) = result.tests
    assert result.healthy and t.verdict == "healthy"
    assert t.n_gpus == 8 and t.n_nodes == 1 and t.expected_busbw_gbps == 475
    assert "issue #272" in (t.expectation_source or "")
    assert t.rows[0].status == "ok" and t.rows[0].ratio == pytest.approx(478.11 / 475)


def test_degraded_multi_node_run_says_how_far_below_and_what_to_check(catalog: Catalog) -> None:
    result = check_nccl(DEGRADED, catalog.server("nvidia-dgx-h100"), catalog, nodes=3, gpus=24)
    (t,) = result.tests
    assert not result.healthy and t.verdict == "degraded"
    assert t.expected_busbw_gbps == pytest.approx(8 * 46)  # 8 NDR NICs at nccl-tests issue 290's 46 GB/s
    assert t.peak_busbw_gbps == pytest.approx(29.50)  # at 32 MB, below the judged sizes
    assert "5.3 GB/s" in t.summary and "99% below" in t.summary
    assert any("ibstat" in c for c in t.causes) and any("peermem" in c for c in t.causes)
    statuses = {r.size_bytes: r.status for r in t.rows}
    assert statuses[1048576] == "small" and statuses[536870912] == "low"


def test_two_nodes_without_ring_are_flagged_as_the_tree_trap(catalog: Catalog) -> None:
    ndr = check_nccl(A3, catalog.server("nvidia-dgx-h100"), catalog)
    assert ndr.tests[0].verdict == "healthy"  # 338.8 of 8 x 46 GB/s
    assert any("NCCL_ALGO=Ring" in w for w in ndr.warnings)
    # the A3 Mega's real NICs are 8 x 200G: there 338.8 GB/s is more than the network carries
    dgx = catalog.server("nvidia-dgx-h100")
    nics = tuple(n.model_copy(update={"gbps": 200.0}) if n.purpose == "gpu-fabric" else n for n in dgx.nics)
    a3 = dgx.model_copy(update={"nics": nics})
    t = check_nccl(A3, a3, catalog).tests[0]
    assert t.verdict == "overstated" and t.expected_busbw_gbps == pytest.approx(8 * 25 * 46 / 50)
    assert "NCCL_ALGO=Ring" in t.summary
    # forcing rings removes the trap verdict
    assert check_nccl("NCCL_ALGO=Ring\n" + A3, a3, catalog).tests[0].verdict != "overstated"


def test_nvls_off_is_named_when_all_reduce_sits_at_the_ring_figure(catalog: Catalog) -> None:
    text = H200.replace("476.72", "368.00").replace("478.11", "369.10")
    t = check_nccl(text, catalog.server("nvidia-dgx-h200"), catalog).tests[0]
    assert t.verdict == "degraded" and "NVLink SHARP" in t.causes[0]


def test_small_sweeps_cannot_be_judged(catalog: Catalog) -> None:
    text = "\n".join(line for line in A3.splitlines() if not line.strip().startswith(("268435456", "536870912",
                                                                                      "1073741824", "2147483648",
                                                                                      "4294967296", "8589934592")))
    t = check_nccl(text, catalog.server("nvidia-dgx-h100"), catalog).tests[0]
    assert t.verdict == "unknown" and "-e 8G" in t.summary


def test_ring_collectives_in_one_h100_node_expect_370(catalog: Catalog) -> None:
    server = catalog.server("nvidia-dgx-h100")
    assert expected_busbw(catalog, server, "all_gather", 1, False)[0] == 370
    assert expected_busbw(catalog, server, "all_reduce", 1, True)[0] == 370
    assert expected_busbw(catalog, server, "all_reduce", 1, False)[0] == 476
    # H200 has only an all-reduce row: its ring collectives take H100's (same NVLink 4 NVSwitch)
    value, source, _ = expected_busbw(catalog, catalog.server("nvidia-dgx-h200"), "reduce_scatter", 1, False)
    assert value == 370 and "same NVLink generation" in (source or "")


def test_several_runs_in_one_file_are_judged_each(catalog: Catalog) -> None:
    gather = H200.replace("sum ", "none").replace("# nThread", "all_gather_perf -b 8G -e 8G -g 8\n# nThread", 1)
    result = check_nccl(H200 + "\n" + gather, catalog.server("nvidia-dgx-h200"), catalog)
    assert [t.collective for t in result.tests] == ["all_reduce", "all_gather"]


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "# nThread 1 nGpus 8\n# Avg bus bandwidth : 1.0\n"])
def test_text_without_result_rows_is_refused_naming_the_file(catalog: Catalog, text: str) -> None:
    with pytest.raises(NcclParseError) as err:
        check_nccl(text, catalog.server("nvidia-dgx-h100"), catalog)
    assert err.value.field == "file"


def test_unknown_collective_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InvalidRequestError) as err:
        check_nccl(H200, catalog.server("nvidia-dgx-h100"), catalog, collective="sendrecv")
    assert err.value.field == "collective"


def test_cli_reads_real_logs_and_sets_the_exit_status(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(cli, ["nccl-check", str(DATA / "h200-8gpu-all-reduce-8g.txt"), "--server", "nvidia-dgx-h200"])
    assert ok.exit_code == 0 and "healthy" in ok.output
    bad = runner.invoke(cli, ["nccl-check", str(DATA / "h100-3node-nccl-1453-all-reduce-degraded.txt"),
                              "--nodes", "3", "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.output)["tests"][0]["verdict"] == "degraded"


def test_cli_bad_files_exit_2_with_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    junk = tmp_path / "junk.txt"
    junk.write_text("not nccl output\n")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for args in (["nccl-check", str(junk)], ["nccl-check", str(tmp_path / "missing.txt")],
                 ["nccl-check", str(binary)], ["nccl-check", str(DATA / "h200-8gpu-all-reduce-8g.txt"),
                                               "--server", "no-such-server"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert "capplan: error:" in result.output and "Traceback" not in result.output


def test_plan_exports_carry_the_nccl_tests_commands(catalog: Catalog) -> None:
    from estimator.planner.contract import PlanLayout
    from estimator.planner.exports.nccl import nccl_tests_commands, plan_nccl_tests

    two = nccl_tests_commands(8, 2)
    assert "all_gather_perf -b 8 -e 16G -f 2 -g 8" in two and "alltoall_perf -b 8 -e 16G -f 2 -g 8" in two
    assert any(c.startswith("mpirun -np 16 -N 8 -x NCCL_IB_HCA=mlx5 -x NCCL_ALGO=Ring") for c in two)
    assert not any("-np 16 -N 8 -x NCCL_IB_HCA=mlx5 all_reduce" in c for c in two)  # two nodes: rings only
    assert any(c.startswith("mpirun -np 32 -N 8") and "NCCL_ALGO" not in c for c in nccl_tests_commands(8, 4))
    assert nccl_tests_commands(8, 1)[-1].startswith("NCCL_ALGO=Ring")
    from estimator import PlanRequest, plan

    result = plan(PlanRequest.model_validate({"model": "llama-3.1-8b", "training": {"method": "lora"},
                                              "hardware": {"server": "nvidia-dgx-h100", "num_nodes": 2}}), catalog)
    exports = result.plans[0].exports
    assert exports is not None and exports.nccl_tests == plan_nccl_tests(
        PlanLayout.model_validate(result.plans[0].layout.model_dump()), catalog.server("nvidia-dgx-h100"))
    assert any("-np 16 -N 8" in c for c in exports.nccl_tests)


def test_cli_cluster_prints_the_design_and_refuses_bad_sizes(tmp_path: Path) -> None:
    runner = CliRunner()
    good = tmp_path / "c.json"
    good.write_text(json.dumps({"server": "nvidia-dgx-h100", "num_nodes": 127}))
    result = runner.invoke(cli, ["cluster", "-i", str(good)])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)["design"]
    assert (d["leaves"], d["spines"], d["node_and_ufm_cables"], d["leaf_spine_links"]) == (32, 16, 1020, 1024)
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"server": "nvidia-dgx-h100", "num_nodes": 16, "switch_ports": 65}))
    result = runner.invoke(cli, ["cluster", "-i", str(bad)])
    assert result.exit_code == 2 and "switch_ports" in result.output
    zero = tmp_path / "z.json"
    zero.write_text(json.dumps({"server": "nvidia-dgx-h100", "num_nodes": 0}))
    result = runner.invoke(cli, ["cluster", "-i", str(zero)])
    assert result.exit_code == 2 and "num_nodes" in result.output


def test_newer_nccl_tests_name_the_collective_in_their_header(catalog: Catalog) -> None:
    body = H200.replace("sum ", "none")
    before = "# nccl-tests version 2.20.0 (b4d5bee)\n# Collective test starting: all_gather_perf\n" + body
    after = body.replace("#\n# Using devices", "# Collective test starting: reduce_scatter_perf\n#\n# Using devices", 1)
    assert [r.collective for r in parse_nccl_tests(before)] == ["all_gather"]
    assert [r.collective for r in parse_nccl_tests(after)] == ["reduce_scatter"]
