# agent/: rdzv-agent, the per-node elastic agent (issue 3).
