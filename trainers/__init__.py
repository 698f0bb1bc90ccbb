"""Models, reward model, PPO, generation backends, the round orchestrator and the job worker. No gradio."""
