# systemd/: the units for rdzvd and rdzv-agent (issue 5).
