"""What a plugin's tests may import from the core besides `persmem_core.sdk`: real servers, hosts, clusters and
browsers (the pytest fixtures `persmem_env`, `persmem_host`, `persmem_server`, `persmem_stdio`, `nats_cluster`,
`cluster_nodes` come with persmem installed, without an import; docs/plugins.md lists them).
"""

from persmem_core import keys
from persmem_core import sandbox_cgroup as cgroups
from persmem_core.host import Host
from persmem_core.keys import key_id, new_key
from persmem_core.local_cluster import NatsCluster
from persmem_core.settings import ClusterConfig, EncryptionConfig
from persmem_core.testing import (
    CRASHED,
    ClusterNodes,
    RunningServer,
    ToolCallError,
    assert_clear_outcome,
    assert_tools_answer_clearly,
    browser_page,
    chromium_browser,
    clean_env,
    dashboard_login,
    free_port,
    persmem_command,
    start_server,
    tool_result,
    write_config,
)

__all__ = ["CRASHED", "ClusterConfig", "ClusterNodes", "EncryptionConfig", "Host", "NatsCluster", "RunningServer",
           "ToolCallError", "assert_clear_outcome", "assert_tools_answer_clearly", "browser_page", "cgroups",
           "chromium_browser", "clean_env", "dashboard_login", "free_port", "key_id", "keys", "new_key",
           "persmem_command", "start_server", "tool_result", "write_config"]
