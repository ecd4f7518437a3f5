"""What a measured profile's kernels time (hardware=measured): each kernel's own work alone."""

from mecefo_exp.timing import profile as profile_mod
from mecefo_exp.timing.kernels import KernelBench


def test_a_measured_optimizer_step_times_clipping_and_adamw_alone(run_exp, monkeypatch):
    """The optimizer kernel is timed beside the forward-only kernel, which leaves the gradients
    None: its gradients are handed to it before its clock starts, and no micro-batch runs inside
    its timed call (it did: every optimizer sample held a whole forward and backward)."""
    inside = {"kernel": None}
    micro_batches = {}
    real_run_mode = KernelBench.run_mode

    def counting(self, *args, **kwargs):
        if inside["kernel"] is not None:
            micro_batches[inside["kernel"]] = micro_batches.get(inside["kernel"], 0) + 1
        return real_run_mode(self, *args, **kwargs)

    real_time_kernels = profile_mod.time_kernels

    def watched(fns, warmup, repeats, device):
        def timed(name, fn):
            def call():  # the call time_kernels times
                inside["kernel"] = name
                try:
                    fn()
                finally:
                    inside["kernel"] = None

            if hasattr(fn, "prepare"):
                call.prepare = fn.prepare
            return call

        return real_time_kernels({k: timed(k, f) for k, f in fns.items()}, warmup, repeats, device)

    monkeypatch.setattr(KernelBench, "run_mode", counting)
    monkeypatch.setattr(profile_mod, "time_kernels", watched)
    summary, run_dir = run_exp(
        "hardware=measured",
        "cluster.profile=fresh",
        "cluster.profile_warmup=1",
        "cluster.profile_repeats=2",
        "trainer.max_steps=2",
        "failure=none",
    )
    assert summary["status"] == "ok"
    assert micro_batches.get("mb:forward", 0) > 0  # the watch works: the micro-batch kernels run one each
    assert micro_batches.get("optimizer", 0) == 0, micro_batches
