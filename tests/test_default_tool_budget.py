"""The default tool sets (what a connection lists for an agent given no sets of its own) fit their token budget:
every listed definition is paid for in every session. Counted as tools/list sends them, with Claude's tokenizer
(tool_costs.py)."""

from persmem_core.host import Host
from persmem_core.tool_costs import DEFAULT_BUDGET, Costs

DEFAULT_SETS = ["memory", "sessions", "mail"]


def test_the_default_sets_cost_at_most_the_budget(tmp_path):
    costs = Costs(Host(environ={"PERSMEM_HOME": str(tmp_path / "home")}))
    total = costs.of_sets(DEFAULT_SETS)
    assert total <= DEFAULT_BUDGET, (f"the default sets cost {total} {costs.unit()} (budget {DEFAULT_BUDGET}): "
                                     f"{costs.summary()}")
    listed = {name for name, (tool_set, _) in costs.per_tool.items() if tool_set in DEFAULT_SETS}
    assert {"memory_store", "memory_search", "session_search", "amq_send", "persmem_whoami"} <= listed
    assert not listed & {"memory_consolidate", "memory_stats", "memory_list_collections", "chorus_init", "shell_exec"}
