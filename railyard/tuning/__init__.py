"""Host tuning: role variables for playbooks/ built from the spec and the plan (no Ansible here)."""
