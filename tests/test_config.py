"""Configs compose for every choice; typos and impossible values fail before compute."""

import sys

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from conftest import ROOT, compose_cfg, run_py
from mecefo_exp.config import ConfigError, validate
from mecefo_exp.methods import REGISTRY

METHODS = list(REGISTRY)
FAILURES = ["none", "low", "medium", "high", "poisson", "asymmetric"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("failure", FAILURES)
def test_every_method_and_failure_composes_and_validates(method, failure):
    cfg = compose_cfg([f"method={method}", f"failure={failure}"])
    validate(cfg)
    assert cfg.method.name == method and cfg.failure.name == failure


@pytest.mark.parametrize(
    "model", ["llama_tiny", "llama_20m", "llama_60m", "llama_130m", "llama_350m", "llama_1b", "llama_7b", "llama_405b"]
)
def test_model_presets(model):
    cfg = compose_cfg([f"model={model}"])
    validate(cfg)


def test_galore_shapes():
    cfg = compose_cfg(["model=llama_1b"])
    m = cfg.model
    assert (m.hidden_size, m.intermediate_size, m.num_attention_heads, m.num_hidden_layers, m.vocab_size) == (
        2048,
        5461,
        32,
        24,
        32000,
    )


def test_typo_in_a_key_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        compose_cfg(["method=mecefo", "method.rnak=3"])
    with pytest.raises(ConfigCompositionException):
        compose_cfg(["cluster.n_workers=eight"])


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(MissingConfigException) as err:
        compose_cfg(["method=ckpt"])
    for name in METHODS:
        assert name in str(err.value)


@pytest.mark.parametrize(
    "override, needle",
    [
        ("cluster.n_workers=0", "cluster.n_workers=0"),
        ("data.micro_batch=0", "data.micro_batch=0"),
        ("data.seq_len=4096", "exceeds model.max_position_embeddings"),
        ("trainer.max_steps=0", "trainer.max_steps=0"),
        ("trainer.lr=-1", "trainer.lr=-1"),
        ("failure=poisson", None),
        ("cluster.detection_s=-5", "cluster.detection_s=-5"),
        ("method.rank=0", "method.rank=0"),
        ("failure.every_h=-1", "failure.every_h=-1"),
    ],
)
def test_impossible_values_are_rejected_with_one_line(override, needle):
    overrides = [override]
    if override == "failure=poisson":
        overrides.append("failure.mtbf=-2")
        needle = "failure.mtbf=-2"
    cfg = compose_cfg(overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_bad_value_exits_with_one_line_before_compute(tmp_path):
    out, _ = run_py("cluster.n_workers=0", f"hydra.run.dir={tmp_path}/r")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["config error: cluster.n_workers=0: must be >= 1"]
    assert not (tmp_path / "r").exists()  # refused before Hydra writes the folder: nothing to collect


def test_a_key_added_with_plus_and_a_printed_config_are_refused_before_any_folder(tmp_path):
    out, _ = run_py("+foo=1", f"hydra.run.dir={tmp_path}/r")
    assert out.returncode == 2 and out.stderr.startswith("config error: foo: no such setting")
    assert not (tmp_path / "r").exists()
    out, _ = run_py("--cfg", "job", "trainer.max_steps=-5")
    assert out.returncode == 2 and out.stderr == "config error: trainer.max_steps=-5: must be >= 1\n"


def test_experiment_preset_overrides_the_defaults():
    cfg = compose_cfg(["experiment=paper_mini"])
    assert (cfg.trainer.max_steps, cfg.data.micro_batch, cfg.data.seq_len, cfg.trainer.threads) == (200, 2, 64, 1)
    validate(cfg)


STUDY_PRESETS = {"paper_table3": 63, "mecefo_ablation": 18, "mecefo_asymmetric": 9, "mecefo_frequency": 12}


@pytest.mark.parametrize(
    "preset,n_jobs",
    [
        pytest.param(p, n, marks=() if p == "paper_table3" else pytest.mark.slow)
        for p, n in sorted(STUDY_PRESETS.items())
    ],
)
def test_study_presets_expand_to_valid_jobs(preset, n_jobs):
    """Every job of the convergence presets composes and validates (before any compute), and
    each preset has the number of jobs its header promises."""
    import itertools

    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = compose_cfg([f"experiment={preset}"])
    assert cfg.experiment == preset and cfg.method.name == "mecefo"
    hydra_cfg = _hydra_cfg([f"experiment={preset}"])
    parser = OverridesParser.create()

    def expand(overrides):
        return [list(j) for b in BasicSweeper.split_arguments(parser.parse_overrides(list(overrides)), None) for j in b]

    params = [f"{k}={v}" for k, v in hydra_cfg.sweeper.params.items()]
    groups = [[job for cell in group for job in expand(cell)] for group in hydra_cfg.sweeper.groups]
    jobs = [p + [o for part in combo for o in part] for p in expand(params) for combo in itertools.product(*groups)]
    assert len(jobs) == n_jobs
    cells = {tuple(o for o in job if not o.startswith(("seed=", "trainer.max_steps="))) for job in jobs}
    for cell in sorted(cells):  # composing takes ~1 s: each distinct cell once
        validate(compose_cfg([f"experiment={preset}", *cell]))


def _hydra_cfg(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True).hydra


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["cluster=torchft", "cluster.n_workers=1"], "need >= 2 workers"),
        (["cluster=torchft", "hardware=measured"], "each process would measure its own clock"),
        (["cluster=torchft", "logger=wandb"], "logger=wandb with cluster=torchft"),
        (["cluster=torchft", "cluster.lighthouse=127.0.0.1:29510"], "http://host:port"),
        (["cluster=torchft", "cluster.heartbeat_timeout_ms=0"], "cluster.heartbeat_timeout_ms=0"),
        (["cluster=torchft", "method=checkpoint", "method.backend=dcp"], "only torch"),
        (["failure.kill=true"], "cluster=torchft (any method)"),
        # one launcher per machine
        (
            [
                "cluster=torchft",
                "cluster.n_workers=4",
                "cluster.machines=2",
                "cluster.machine_rank=2",
                "cluster.coordinator=127.0.0.1:29510",
            ],
            "cluster.machine_rank=2 with cluster.machines=2: must be in 0..1",
        ),
        (
            ["cluster=torchft", "cluster.n_workers=3", "cluster.machines=2", "cluster.coordinator=127.0.0.1:29510"],
            "n_workers must be a multiple of machines",
        ),
        (["cluster=torchft", "cluster.n_workers=4", "cluster.machines=2"], "give cluster.coordinator=host:port"),
        (["cluster=torchft", "cluster.coordinator=node001"], "give host:port"),
        (["cluster=torchft", "cluster.coordinator=node001:70000"], "a port in 1..65535"),
        # nothing listens beyond loopback unless cluster.bind says so
        (
            ["cluster=torchft", "cluster.n_workers=4", "cluster.machines=2", "cluster.coordinator=node001:29510"],
            "machine 0 listens on loopback only",
        ),
        (["cluster=torchft", "cluster.advertise=node001"], "the servers listen on loopback only"),
        (["cluster=torchft", "cluster.bind=eth0"], "give an address of this machine"),
        (["cluster=torchft", "cluster.bind=0.0.0.0"], "also give cluster.advertise"),
        # torchft 0.2.0 builds its Manager's URI as http://host:port: an IPv6 host failed in every worker
        (["cluster=torchft", "cluster.bind=::1"], "cluster.bind='::1': an IPv6 address"),
        (["cluster=torchft", "cluster.bind=::", "cluster.advertise=node001"], "cluster.bind='::': an IPv6 address"),
        (
            [
                "cluster=torchft",
                "cluster.n_workers=4",
                "cluster.machines=2",
                "cluster.bind=10.0.0.5",
                "cluster.coordinator='[fd00::5]:29510'",
            ],
            "cluster.coordinator='[fd00::5]:29510': an IPv6 address",
        ),
        (
            ["cluster=torchft", "cluster.bind=0.0.0.0", "cluster.advertise=fd00::5"],
            "cluster.advertise='fd00::5': an IPv6",
        ),
        (["cluster.machines=2"], "one launcher per machine is cluster=torchft's"),
    ],
)
def test_torchft_settings_are_checked_before_anything_starts(overrides, needle):
    cfg = compose_cfg(overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_torchft_default_config_is_valid():
    cfg = compose_cfg(["cluster=torchft", "failure.kill=true", "method=oobleck"])
    validate(cfg)
    assert cfg.cluster.n_workers == 3 and cfg.cluster.lighthouse is None


def test_torchft_across_machines_is_valid_with_an_address_to_listen_on():
    for machine in (0, 1):
        validate(
            compose_cfg(
                [
                    "cluster=torchft",
                    "cluster.n_workers=4",
                    "cluster.machines=2",
                    f"cluster.machine_rank={machine}",
                    "cluster.coordinator=node001:29510",
                    "cluster.bind=10.0.0.5",
                ]
            )
        )
    # every interface, by choice, with the name the other machines use
    validate(compose_cfg(["cluster=torchft", "cluster.bind=0.0.0.0", "cluster.advertise=node001"]))
    # two launchers on one host (the tests): loopback throughout
    validate(
        compose_cfg(
            ["cluster=torchft", "cluster.n_workers=4", "cluster.machines=2", "cluster.coordinator=127.0.0.1:29510"]
        )
    )


def _is_local(address: str) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        try:
            s.bind((address, 0))  # only an address one of this machine's interfaces has binds
        except OSError:
            return False
    return True


def test_the_bind_address_names_the_interface_gloo_is_given():
    import socket

    from mecefo_exp.tiers.torchft.network import interface_of, loopback_interface, network_environment

    assert interface_of("127.0.0.1") == loopback_interface()
    assert network_environment("0.0.0.0") == {}  # every interface: gloo picks as it would alone
    # documentation addresses (RFC 5737): the first that this machine does not have
    foreign = next(a for a in ("203.0.113.254", "198.51.100.254", "192.0.2.254") if not _is_local(a))
    with pytest.raises(ConfigError, match="no interface of this machine has this address"):
        network_environment(foreign)
    # this machine's own addresses, where it has any beyond loopback, name an interface
    own = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for address in sorted(a for a in own if not a.startswith("127.") and _is_local(a)):
        assert network_environment(address)["GLOO_SOCKET_IFNAME"] in {n for _, n in socket.if_nameindex()}


def test_launchers_of_other_machines_lock_and_record_apart(tmp_path):
    from mecefo_exp.cli.job import lock_folder
    from mecefo_exp.config.hydra_glue import hydra_output_subdir

    one = compose_cfg(
        [
            "cluster=torchft",
            "cluster.n_workers=4",
            "cluster.machines=2",
            "cluster.machine_rank=1",
            "cluster.coordinator=127.0.0.1:29510",
        ]
    )
    assert lock_folder(tmp_path, one) == tmp_path / "torchft" / "machine-1"
    assert lock_folder(tmp_path, compose_cfg(["cluster=torchft"])) == tmp_path
    assert hydra_output_subdir("false", str(tmp_path), 1) == ".hydra/machine-1"
    assert hydra_output_subdir("false", str(tmp_path), 0) == ".hydra"


def test_torchft_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchft", None)  # `import torchft` raises ImportError
    from mecefo_exp.tiers.torchft.network import require_torchft

    with pytest.raises(ConfigError, match=r"pip install -c constraints.txt torchft==0.2.0"):
        require_torchft()


def test_a_renamed_checkpoint_setting_is_refused_with_its_new_name_and_an_old_folder_keeps_its_value():
    """Every method's periodic checkpoint is `checkpoint_interval`: the old names (checkpoint-restart's
    `interval`, BAFT's `checkpoint_every`) are refused in one line naming the new one, and a run folder
    written under an old name resumes with its value."""
    from omegaconf import OmegaConf

    from mecefo_exp.cli.preflight import check_overrides
    from mecefo_exp.config import typed_config

    for method, old in (("checkpoint", "interval"), ("baft", "checkpoint_every")):
        said = check_overrides([f"method={method}", f"method.{old}=7"])
        assert said is not None and f"{old} is now called checkpoint_interval" in said, said
        assert check_overrides([f"method={method}", "method.checkpoint_interval=7"]) is None
        stored = OmegaConf.create({"method": {"name": method, old: 7}})
        assert typed_config(stored).method.checkpoint_interval == 7
