# Railyard's controller warm-up for Ansible (ansible-core 2.19, pinned in pyproject.toml).
"""Load Jinja's filter and test plugins in ansible-playbook's own process before any worker forks.

ansible-playbook forks a worker for each task and host, and the worker templates the task's
arguments and conditions. The first filter or test a process uses loads every builtin filter or
test plugin, and the controller's own process never templates before the first worker forks: so
each worker loaded them again (ansible-core notes the same about its Jinja lexer, "pre-generate the
default cached lexer before forking", in _internal/_templating/_jinja_bits.py). Loading both
sets here, once, and templating one expression puts the plugins and the lexer where every worker
inherits them (docs/benchmarks.md, "The controller's workers").
"""

from __future__ import annotations

DOCUMENTATION = """
    name: railyard_warmup
    type: aggregate
    short_description: load Jinja's filter and test plugins once, before Ansible forks its workers
    description:
      - At the playbook's start, lists the builtin filter and test plugins and templates one
        expression that uses a filter and a test, so that those plugins and the Jinja lexer are
        loaded in the controller's process and inherited by every worker it forks, instead of
        loaded by each.
    requirements:
      - enabled in callbacks_enabled (playbooks/ansible.cfg)
"""

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible.template import Templar, trust_as_template

# One filter and one test: the first of each a process uses loads every builtin one of its kind.
WARMUP = "{{ ['1'] | map('int') | list | length > 0 and 'a' is string }}"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "railyard_warmup"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        # Not before: the playbook's roles and collections have added their plugin paths by now.
        # The loaders' own listing fills their caches by name as well as loading the modules
        # (2.5 controller CPU-s per host against 2.6 with the template alone, where it was
        # measured); the template builds the Jinja lexer.
        for loader in (filter_loader, test_loader):
            for _ in loader.all():
                pass
        Templar(loader=DataLoader(), variables={}).template(trust_as_template(WARMUP))
