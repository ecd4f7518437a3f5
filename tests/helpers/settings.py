"""Run settings more than one test file starts from."""

#: a numerics-free run of four nodes on a throughput table (set `hardware.tables`), replaying a
#: node trace (set `failure.path`): the artifact's setting, small enough for the fast tier
NODE_TRACE_ON_A_TABLE = [
    "hardware=table",
    "hardware.samples_per_step=100",
    "failure=nodes",
    "failure.node_ready_s=1",
    "cluster.n_workers=4",
    "cluster.detection_s=0",
    "trainer.numerics=false",
    "trainer.max_steps=1000",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "model=llama_tiny",
    "model.vocab_size=512",
    "data.micro_batch=1",
    "data.seq_len=16",
]
