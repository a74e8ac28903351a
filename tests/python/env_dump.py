#!/usr/bin/python3
"""Prints the worker environment contract as NAME=value lines (set ones only,
in the order of common/worker_env.h), like `elastrun-test-worker --print-env`,
so compatibility tests can compare what a Python worker sees."""
import os

NAMES = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
    "OMP_NUM_THREADS", "ELASTRUN_AGENT_SOCKET", "ELASTRUN_ROUND",
    "ELASTRUN_SNAPSHOT",
]

if __name__ == "__main__":
    for name in NAMES:
        if name in os.environ:
            print(f"{name}={os.environ[name]}")
