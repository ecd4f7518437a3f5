"""mecefo-exp: an experiment harness for fault-tolerant LLM pretraining (MeCeFO and baselines)."""
