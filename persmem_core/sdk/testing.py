"""What a plugin's tests may import from the core besides `persmem_core.sdk`: real servers, hosts, clusters and
browsers (the pytest fixtures `persmem_env`, `persmem_host`, `persmem_server`, `persmem_stdio`, `nats_cluster`,
`cluster_nodes` come with persmem installed, without an import; docs/plugins.md lists them), and
`call_tool(host, name, args, agent=...)` to call a tool of a started Host in this process.
"""

from persmem_core.cluster.local_cluster import NatsCluster
from persmem_core.crypto import keys
from persmem_core.crypto.keys import key_id, new_key
from persmem_core.host import Host
from persmem_core.net.addresses import free_port
from persmem_core.sandbox import cgroup as cgroups
from persmem_core.settings import ClusterConfig, EncryptionConfig
from persmem_core.testing import (
    ClusterNodes,
    assert_tools_answer_clearly,
    browser_page,
    chromium_browser,
    clean_env,
    dashboard_login,
    publish_until_acked,
    start_server,
    write_config,
)
from persmem_core.transport.server_process import RunningServer, persmem_command
from persmem_core.transport.tool_answers import CRASHED, ToolCallError, assert_clear_outcome, tool_result
from persmem_core.transport.tools import call_tool

__all__ = ["CRASHED", "ClusterConfig", "ClusterNodes", "EncryptionConfig", "Host", "NatsCluster", "RunningServer",
           "ToolCallError", "assert_clear_outcome", "assert_tools_answer_clearly", "browser_page", "call_tool",
           "cgroups", "chromium_browser", "clean_env", "dashboard_login", "free_port", "key_id", "keys", "new_key",
           "persmem_command", "publish_until_acked", "start_server", "tool_result", "write_config"]
