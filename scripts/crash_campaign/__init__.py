"""Parts of scripts/crash-campaign: the writer process, the strict archive check, and the
handling of daf-mount daemons and mounts."""
