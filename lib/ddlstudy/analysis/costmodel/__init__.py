"""The step-time model (analytic): alpha-beta-gamma per all-reduce algorithm, one training step per
strategy on one or two link tiers, per-host constants fitted to measured cells, three checks
(held out by configuration, published points, settings alone) and the regime map.

    python -m ddlstudy.costmodel validate results/reference
    python -m ddlstudy.costmodel regime-map --model resnet50 --out DIR
    python -m ddlstudy.costmodel contention results/reference/<chapter>

Modules: `alphabeta` (the collectives' cost terms and their fit), `step` (one step: tiers, S
servers with incast, the overlapped PS, latency per message), `cells` (measured cells, fit,
`project`), `links` (all-reduce alone on shaped links), `checks` (the three validations),
`regime` (the regime map), `contention` (repeats against the host load they ran under),
`cli`. Every name below is importable from here.
"""

from ddlstudy.analysis.costmodel.alphabeta import (
    ALGORITHMS,
    NETWORKS,
    _nnls,
    fit,
    predict,
    predict_network,
    predict_table,
    prediction_error_table,
    terms,
)
from ddlstudy.analysis.costmodel.cells import (
    CELL_COLUMNS,
    CELL_KEY,
    RecordsError,
    Validation,
    _cell_step,
    _usable,
    fit_constants,
    project,
    read_cells,
    split_cells,
    validate,
    validation_for,
    validation_summary,
)
from ddlstudy.analysis.costmodel.checks import (
    FIT_CONFIGURATION,
    data_path,
    held_out_by_configuration,
    multi_node,
    placement_of,
    predict_point,
    predict_published,
    published_summary,
    settings_alone,
    with_published,
)
from ddlstudy.analysis.costmodel.cli import main
from ddlstudy.analysis.costmodel.contention import load_sensitivity, repeat_table
from ddlstudy.analysis.costmodel.links import (
    LINK_COLUMNS,
    fit_alpha,
    read_link_bench,
    validate_collectives,
)
from ddlstudy.analysis.costmodel.regime import (
    BEST_PS,
    NO_WINNER,
    TESTBED_LABEL,
    WINNER_ARMS,
    WORDS,
    RegimeMap,
    regime_map,
    ring_and_best_ps,
    winners_map,
)
from ddlstudy.analysis.costmodel.step import (
    BACKWARD_SHARE,
    FLAT,
    GOODPUT,
    HIERARCHICAL,
    PS_STEP,
    SETTINGS_ALONE,
    STEP_STRATEGIES,
    Constants,
    Link,
    StepTime,
    Tiers,
    allreduce_step,
    bucket_layout,
    gradient_bytes,
    hierarchical_traffic,
    node_nic_traffic,
    predict_step,
    profile_link,
    project_step,
    ps_step,
    server_shares,
    sharded_step,
    sharded_traffic,
    unmodelled,
    variable_placement,
)

__all__ = [
    "ALGORITHMS", "BACKWARD_SHARE", "CELL_COLUMNS", "CELL_KEY", "FIT_CONFIGURATION", "FLAT",
    "GOODPUT",
    "HIERARCHICAL", "LINK_COLUMNS", "NETWORKS", "PS_STEP", "SETTINGS_ALONE", "STEP_STRATEGIES",
    "BEST_PS", "NO_WINNER", "TESTBED_LABEL", "WINNER_ARMS", "WORDS", "Constants", "Link",
    "RecordsError", "RegimeMap", "StepTime",
    "Tiers", "Validation",
    "_cell_step", "_nnls", "_usable", "allreduce_step", "bucket_layout", "fit", "fit_alpha",
    "fit_constants", "data_path", "gradient_bytes", "held_out_by_configuration",
    "hierarchical_traffic",
    "load_sensitivity", "repeat_table",
    "main", "node_nic_traffic", "predict", "predict_network", "predict_point",
    "predict_published", "predict_step", "predict_table", "prediction_error_table",
    "profile_link", "project", "project_step", "ps_step", "published_summary", "read_cells",
    "sharded_step", "sharded_traffic", "winners_map",
    "read_link_bench", "regime_map", "ring_and_best_ps", "settings_alone", "split_cells",
    "terms", "unmodelled", "validate", "validate_collectives", "validation_for",
    "validation_summary", "multi_node", "placement_of", "server_shares", "variable_placement",
    "with_published",
]
