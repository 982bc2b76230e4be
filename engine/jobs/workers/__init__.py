"""What takes runs off the queue and trains them: the local worker (`worker`), its pool of processes
(`pool`), the Ray backend (`ray_backend`) and a worker's warm-up before its first run (`warmup`).

Submodules are imported directly (`from engine.jobs.workers.worker import Worker`)."""
