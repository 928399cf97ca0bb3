"""Config: one TOML file, msgspec sections, env overrides, errors with file and path."""

import json
import re

import pytest

from persmem_core.errors import ConfigError


def test_no_config_file_means_embedded_defaults(persmem_host):
    host = persmem_host()
    assert not host.config_path.exists()
    assert host.config.server.host == "127.0.0.1"
    assert host.config.server.port == 8765


def test_plugin_section_with_defaults_and_file_values(persmem_host):
    host = persmem_host(config={"echo": {"prefix": "hi"}}, PERSMEM_PLUGIN_MODULES="sample_echo")
    assert host.config.echo.prefix == "hi"
    assert host.config.echo.repeat == 1


def test_wrong_type_names_file_and_path(persmem_host):
    host = persmem_host(config='[server]\nport = "eighty"\n')
    with pytest.raises(ConfigError) as info:
        host.config
    message = str(info.value)
    assert str(host.config_path) in message
    assert "$.server.port" in message


def test_nested_path_in_lists(persmem_host):
    host = persmem_host(config='[server]\nallowed_hosts = ["ok", 3]\n')
    with pytest.raises(ConfigError, match=r"\$\.server\.allowed_hosts\[1\]"):
        host.config


def test_unknown_field_is_an_error_unknown_section_a_warning(persmem_host):
    host = persmem_host(config="[server]\nprot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        host.config
    host = persmem_host(config="[not_installed]\nx = 1\n")
    host.config
    assert any("not_installed" in w for w in host.warnings)


def test_broken_toml_names_the_file(persmem_host):
    host = persmem_host(config="[server\nport = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        host.config


def test_env_override_sets_values_and_is_named_in_errors(persmem_host):
    host = persmem_host(PERSMEM_SERVER__PORT="9123", PERSMEM_SERVER__ALLOWED_HOSTS='["a.example"]')
    assert host.config.server.port == 9123
    assert host.config.server.allowed_hosts == ["a.example"]
    host = persmem_host(PERSMEM_SERVER__PORT="not-a-port")
    with pytest.raises(ConfigError, match="PERSMEM_SERVER__PORT"):
        host.config


def test_cli_config_check_exits_nonzero_without_touching_data(run_cli, persmem_env, tmp_path):
    env = persmem_env()
    home = tmp_path / "home"
    home.mkdir()
    (home / "persmem.toml").write_text('[server]\nport = "x"\n')
    before = sorted(p.name for p in home.iterdir())
    result = run_cli("config", "check", env=env)
    assert result.returncode == 1
    assert "$.server.port" in result.stderr and "persmem.toml" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("serve", env=env)
    assert result.returncode == 1 and "$.server.port" in result.stderr
    assert sorted(p.name for p in home.iterdir()) == before


def test_cli_config_show_and_schema(run_cli, sample_env):
    env = sample_env()
    shown = run_cli("config", "show", "--format", "json", env=env)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["server"]["port"] == 8765 and data["echo"]["prefix"] == "echo"
    toml_out = run_cli("config", "show", env=env)
    assert "[server]" in toml_out.stdout
    schema = json.loads(run_cli("config", "schema", env=env).stdout)
    props = schema["$defs"]["PersmemConfig"]["properties"] if "$defs" in schema else schema["properties"]
    assert {"server", "plugins", "echo"} <= set(props)
    assert "Address to bind" in json.dumps(schema)


def test_schema_validates_real_config(run_cli, sample_env):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(run_cli("config", "schema", env=sample_env()).stdout)
    jsonschema.validate({"server": {"port": 9000}, "echo": {"prefix": "x"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"server": {"port": "nope"}}, schema)


@pytest.mark.parametrize("section,setting,hint", [("shell", 'roots = ["/tmp"]', "[workspace] roots"),
                                                  ("git", 'roots = ["/tmp"]', "[workspace] roots"),
                                                  ("shell", "default_timeout = 3", "never used")])
def test_a_setting_that_moved_names_where_it_went(persmem_host, section, setting, hint):
    host = persmem_host(config=f"[{section}]\n{setting}\n")
    with pytest.raises(ConfigError, match=re.escape(hint)):
        host.config
