"""SoloBatch (vectorised timing of Programs whose transfers never share a link) equals the fast engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2acc import plan
from a2acc.analysis.fastsim import simulate_setup
from a2acc.analysis.incast import IncastModel
from a2acc.analysis.levels import SoloBatch, all_solo
from a2acc.analysis.model import CALIBRATED_ROCE, SimModel
from a2acc.analysis.simulate import routes
from a2acc.model.topology import load_topology
from a2acc.model.traffic import generate

MiB = 1 << 20


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["uniform", "zipf", "balanced"]),
    # one batch may mix server counts (a calibration over several): each item keeps its own links
    items=st.lists(
        st.tuples(st.sampled_from([256 << 10, 3 * MiB, 48 * MiB]), st.integers(2, 4)), min_size=1, max_size=3
    ),
    seed=st.integers(0, 40),
    alpha=st.floats(0.0, 50.0),
    stage=st.floats(0.0, 300.0),
    fill=st.sampled_from([0.0, 64e3, 700e3, 8e6]),
    eager=st.sampled_from([64 << 10, 4 * MiB]),
    eff=st.floats(0.5, 1.0),
    intra=st.floats(0.3, 1.0),
    host=st.lists(st.booleans(), min_size=3, max_size=3),
    onset=st.sampled_from([0.0, 256e3, 3e6]),
)
def test_solo_batch_times_spreadout_like_the_engine(
    kind, items, seed, alpha, stage, fill, eager, eff, intra, host, onset
):
    rts = []
    for i, (size, servers) in enumerate(items):
        topo = load_topology("mi300x-100g", servers)
        prog = plan(topo, generate(kind, topo.nranks, size, seed=seed + i), "spreadout")
        rts.append(routes(prog, topo, host_launched=host[i]))
    assert all(all_solo(r) for r in rts)
    model = SimModel(
        "t",
        "roce",
        eff,
        intra,
        alpha * 1e-6,
        stage * 1e-6,
        float(eager),
        IncastModel.off(),
        "test",
        fill,
        onset,
    )
    got = SoloBatch(rts).makespans(model)
    want = [simulate_setup(r.setup(model), tolerance=0.0).makespan_s for r in rts]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_programs_whose_transfers_share_links_are_not_solo():
    topo = load_topology("mi300x-100g", 2)
    m = generate("uniform", topo.nranks, 4 * MiB, seed=1)
    assert not all_solo(routes(plan(topo, m, "direct"), topo))
    assert all_solo(routes(plan(topo, m, "spreadout"), topo))
    # solo Programs never see incast: the RoCE model times them like its lossless twin
    r = routes(plan(topo, m, "spreadout"), topo)
    lossless = CALIBRATED_ROCE.with_incast(IncastModel.off())
    assert SoloBatch([r]).makespans(CALIBRATED_ROCE)[0] == pytest.approx(
        simulate_setup(r.setup(lossless), tolerance=0.0).time_s, rel=1e-12
    )
