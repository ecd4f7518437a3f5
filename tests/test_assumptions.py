"""What advise states with its answer: the failure model's assumptions, and where the winner changes."""

from analysis import advise, assumptions
from analysis.simulate import compose


def test_the_map_failure_model_states_what_each_whole_job_cause_destroys():
    cfg = compose(["experiment=decision_map", "cluster.n_workers=256", "trainer.numerics=false"])
    stated = {a.key: a for a in assumptions.stated(cfg)}
    assert stated["failure.job_faults.Dependency"].value == "processes"
    assert "Software Bug" in stated["failure.job_faults.Dependency"].meaning
    assert stated["failure.job_faults.Unknown"].value == "progress"
    assert stated["cluster.collective_timeout_s"].value == 600.0
    assert stated["method.checkpoint_write"].value == "sync"
    assert all(a.value not in a.alternatives for a in stated.values())


def test_llama3s_cluster_gets_the_maps_failure_model_unless_the_command_names_one():
    assert advise.with_the_maps_failure_model(["experiment=llama3_405b"])[-1] == "failure=llama3_taxonomy"
    assert advise.with_the_maps_failure_model(["experiment=llama3_405b", "failure=llama3"]) == [
        "experiment=llama3_405b",
        "failure=llama3",
    ]
    assert advise.with_the_maps_failure_model(["failure=high"]) == ["failure=high"]


def test_the_robustness_line_names_the_first_value_where_the_runner_up_is_ahead(monkeypatch):
    cfg = compose(["experiment=decision_map", "cluster.n_workers=256", "trainer.numerics=false"])
    stated = [a for a in assumptions.stated(cfg) if a.key == "failure.replace_s"]
    assert [str(v) for v in stated[0].alternatives] == ["60", "3600", "86400"]

    def fake_run_all(jobs, processes=2):  # the runner-up ("b") is ahead once repairs take an hour or more
        out = []
        for overrides, values in jobs:  # a job: the method's overrides and the values set on its config
            method = next(o.split("=")[1] for o in overrides if o.startswith("method="))
            given = next(o.split("=")[1] for o in overrides if o.startswith("failure.replace_s="))
            repair = float(values.get("failure.replace_s", given))  # a value set replaces the override
            ahead = (method == "b") == (repair >= 3600)
            out.append(
                {
                    "status": "ok",
                    "steps": 100,
                    "sim_time_s": 100 if ahead else 110,
                    "clock": {"failure_free_step_s": 1.0},
                }
            )
        return out

    monkeypatch.setattr(advise, "run_all", fake_run_all)
    results = [{"method": "a"}, {"method": "b"}]
    jobs = {"a": [["method=a", "failure.replace_s=600"]], "b": [["method=b", "failure.replace_s=600"]]}
    robust = advise.robustness(stated, results, jobs, [], processes=1)
    assert robust["flips"] == {"failure.replace_s": 3600}
    # the alternative's value replaced the one the job had (one value per key)
    assert robust["winner"] == "a" and robust["second"] == "b"


def test_a_value_set_on_a_composed_config_is_the_config_its_override_composes():
    """advise's robustness runs set one value on a composed config instead of composing again."""
    from omegaconf import OmegaConf

    from analysis.simulate import compose_seeded

    base = ["experiment=decision_map", "cluster.n_workers=256", "trainer.numerics=false", "method=oobleck"]
    for key, value in (("cluster.detection_s", 120), ("failure.job_faults.Unknown", "processes"), ("seed", 2)):
        values = {} if key == "seed" else {key: value}
        seed = [f"seed={value}"] if key == "seed" else []
        assert OmegaConf.to_container(compose_seeded(base + seed, values)) == OmegaConf.to_container(
            compose(base + [f"{key}={value}"])
        ), key
