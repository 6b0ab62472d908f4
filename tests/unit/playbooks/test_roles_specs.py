"""The roles' contracts, checked statically: argument specs match defaults, every default is
commented, modules are documented and support check mode, names are fully qualified, templates
carry the managed-by header, module_utils are the model's own files, reboots are gated, every
notification has a handler, and one role regenerates the bootloader configuration and reboots."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = ROOT / "playbooks"
ROLES = sorted(p.name for p in (PLAYBOOKS / "roles").iterdir() if p.is_dir())
MODULES = sorted({p.resolve() for p in PLAYBOOKS.glob("**/library/*.py")})


def _yaml(path: Path):
    return yaml.safe_load(path.read_text()) or {}


# Roles that site.yml does not run, each with who runs it instead.
NOT_IN_SITE: dict[str, str] = {"acceptance": "playbooks/acceptance.yml, after tuning (railyard.tuning.acceptance)"}


def test_the_site_playbook_runs_every_role():
    plays = _yaml(PLAYBOOKS / "site.yml")
    used = {r["role"] for play in plays for r in play.get("roles") or ()}
    for play in plays:
        for task in _play_tasks(play):
            for module in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if module in task and "tasks_from" not in task[module]:
                    used.add(task[module]["name"])
    for role in list(used):  # and the roles they depend on (host_hw)
        for dep in _yaml(PLAYBOOKS / "roles" / role / "meta/main.yml").get("dependencies") or ():
            used.add(dep if isinstance(dep, str) else dep["role"])
    assert used == set(ROLES) - set(NOT_IN_SITE)


def test_a_role_the_site_play_runs_without_its_own_argument_check_is_checked_up_front():
    # rolespec_validate: false saves a task per role and host only if the play's first task checks
    # the same variables against the same spec, before any role runs.
    plays = _yaml(PLAYBOOKS / "site.yml")
    unchecked, checked = set(), None
    for play in plays:
        for task in _play_tasks(play):
            for module in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if module in task and task[module].get("rolespec_validate") is False:
                    unchecked.add((task[module]["name"], task[module].get("tasks_from", "main")))
            if "ansible.builtin.validate_argument_spec" in task:
                assert checked is None, "one up-front check"
                assert play is plays[0] and task is (play.get("pre_tasks") or [None])[0], \
                    "the check runs before anything else, outside any block"
                assert task.get("any_errors_fatal") is True, "a host that fails it stops the run"
                assert task.get("tags") == ["always"], "no role's --tags or --skip-tags skips it"
                checked = set(task["loop"])
    assert unchecked and checked is not None
    for role, entry in sorted(unchecked):
        assert role in checked, f"{role} runs with rolespec_validate false and is not in the up-front check"
        specs = _yaml(PLAYBOOKS / "roles" / role / "meta/argument_specs.yml")["argument_specs"]
        assert specs[entry]["options"] == specs["main"]["options"], \
            f"{role}:{entry} has options of its own; the up-front check reads main's"
    assert checked == {role for role, _ in unchecked}, "a role checked up front that the play checks itself"


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_and_defaults_name_the_same_variables_with_the_same_values(role):
    defaults = _yaml(PLAYBOOKS / "roles" / role / "defaults/main.yml")
    options = _yaml(PLAYBOOKS / "roles" / role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), (
        f"{role}: only in defaults {sorted(set(defaults) - set(options))}, "
        f"only in argument_specs {sorted(set(options) - set(defaults))}")
    for name, value in defaults.items():
        assert name.startswith(role + "_"), f"{role}: public variable {name} lacks the role prefix"
        spec_default = options[name].get("default")
        if isinstance(value, str) and "{{" in value:
            continue  # defaults that follow another role's variable are templated at run time
        assert spec_default == value, f"{role}: {name} defaults to {value!r}, argument_specs says {spec_default!r}"
        assert options[name].get("description"), f"{role}: {name} has no description in argument_specs"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_explained_by_a_comment_above_it(role):
    lines = (PLAYBOOKS / "roles" / role / "defaults/main.yml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z_]+:", line):
            block = []
            for above in reversed(lines[:i]):
                if not above.strip():
                    break
                block.append(above)
            assert any(b.lstrip().startswith("#") for b in block), f"{role}: {line.split(':')[0]} has no comment"


@pytest.mark.parametrize("role", ROLES)
def test_internal_variables_are_double_underscore_prefixed(role):
    path = PLAYBOOKS / "roles" / role / "vars/main.yml"
    if path.exists():
        for name in _yaml(path):
            assert name.startswith(f"__{role}_"), f"{role}: vars/main.yml defines {name}"


def _tasks_of(tasks):
    for task in tasks:
        if "block" in task:  # a block's own tasks, and those it runs on failure or always
            for key in ("block", "rescue", "always"):
                yield from _tasks_of(task.get(key) or [])
        else:
            yield task


def _play_tasks(play):
    for key in ("pre_tasks", "tasks", "post_tasks"):
        yield from _tasks_of(play.get(key) or [])


def _tasks(path: Path):
    yield from _tasks_of(_yaml(path) if path.exists() else [])


@pytest.mark.parametrize("role", ROLES)
def test_modules_are_fully_qualified_or_the_projects_own(role):
    own = {p.stem for p in PLAYBOOKS.glob("**/library/*.py")}
    keys = {"name", "when", "loop", "loop_control", "register", "vars", "notify", "listen", "tags",
            "check_mode", "changed_when", "failed_when", "become", "no_log", "delegate_to", "run_once"}
    for f in ("tasks/main.yml", "handlers/main.yml"):
        for task in _tasks(PLAYBOOKS / "roles" / role / f):
            module = next(k for k in task if k not in keys)
            assert module in own or re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+", module), \
                f"{role}/{f}: task {task.get('name')!r} uses {module}"
            if module in own:
                assert (PLAYBOOKS / "library" / f"{module}.py").exists() or \
                    (PLAYBOOKS / "roles" / role / "library" / f"{module}.py").exists(), \
                    f"{role}: {module} is in neither playbooks/library nor the role's library"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.stem)
def test_custom_modules_are_documented_and_support_check_mode(module):
    source = module.read_text()
    tree = ast.parse(source)
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= names, f"{module.name}: missing docs"
    for n in tree.body:
        if isinstance(n, ast.Assign) and n.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            yaml.safe_load(n.value.value)  # each must be valid YAML
    doc = yaml.safe_load(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                              and n.targets[0].id == "DOCUMENTATION"))
    assert doc["module"] == module.stem
    assert "supports_check_mode=True" in source


def test_module_utils_are_the_projects_own_files_not_copies_and_need_only_the_standard_library():
    import ast
    import sys

    for link in (PLAYBOOKS / "module_utils").iterdir():
        assert link.is_symlink(), f"{link.name} is a copy; it must link to its file under railyard/"
        target = Path(os.path.realpath(link))
        assert target.parent in (ROOT / "railyard/model", ROOT / "railyard/tuning")
        assert link.name == f"railyard_{target.name}"
        # A host has Python and Ansible, nothing of Railyard's but what module_utils ships.
        for node in ast.walk(ast.parse(target.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("railyard", "ansible"), f"{target.name} imports {name}"
    cfg = (PLAYBOOKS / "ansible.cfg").read_text()
    assert re.search(r"^module_utils\s*=\s*\./module_utils$", cfg, re.M)


@pytest.mark.parametrize("template", sorted(PLAYBOOKS.glob("roles/*/templates/*.j2")), ids=lambda p: p.name)
def test_templates_start_with_the_managed_by_header(template):
    if template.name.startswith("_"):
        # A partial: the file it is written into is a template of the role that includes it.
        including = [t for t in template.parent.glob("*.j2") if f"'{template.name}'" in t.read_text()]
        assert including, f"{template.name} is a partial (its name starts with _) that no template includes"
        template = including[0]
    lines = template.read_text().splitlines()
    # A script's first line is its interpreter; the header follows it.
    first = lines[1] if lines[0].startswith("#!") else lines[0]
    assert "Managed by Railyard" in first, f"{template.name}: {first!r}"


def _task_files(role: str) -> list[Path]:
    """Every file of the role's tasks and handlers, the entry points' includes too."""
    return sorted(p for d in ("tasks", "handlers") for p in (PLAYBOOKS / "roles" / role / d).glob("*.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_reboots_only_in_handlers_gated_by_reboot_ok(role):
    for path in _task_files(role):
        for task in _tasks(path):
            if "ansible.builtin.reboot" in task:
                assert path.parent.name == "handlers", f"{role}: a reboot outside handlers ({path.name})"
                assert task.get("when") == f"{role}_reboot_ok | bool", f"{role}: reboot not gated by {role}_reboot_ok"
            text = yaml.safe_dump(task)
            assert "rc.local" not in text and "echo " not in text, f"{role}: {task.get('name')}"


def _dependencies(role: str) -> set[str]:
    out = set()
    for dep in _yaml(PLAYBOOKS / "roles" / role / "meta/main.yml").get("dependencies") or ():
        name = dep if isinstance(dep, str) else dep["role"]
        out |= {name} | _dependencies(name)
    return out


def _notified(role: str) -> set[str]:
    out = set()
    for path in _task_files(role):
        for task in _tasks(path):
            notify = task.get("notify") or []
            out |= {notify} if isinstance(notify, str) else set(notify)
    return out


@pytest.mark.parametrize("role", ROLES)
def test_every_notification_reaches_a_handler_of_the_role_or_its_dependencies(role):
    heard = set()
    for name in {role} | _dependencies(role):
        for handler in _tasks(PLAYBOOKS / "roles" / name / "handlers/main.yml"):
            listen = handler.get("listen") or []
            heard |= {handler.get("name")} | ({listen} if isinstance(listen, str) else set(listen))
    assert _notified(role) <= heard, f"{role}: nothing handles {sorted(_notified(role) - heard)}"


def test_one_regeneration_and_one_reboot_serve_every_role_that_changes_the_kernel_command_line():
    # Handlers of one topic run once per flush, in the order they are defined: a host whose roles
    # changed several drop-ins regenerates its bootloader configuration once, then reboots once.
    topic = "kernel command line changed"
    reboots = {(role, task.get("name")) for role in ROLES for path in _task_files(role) for task in _tasks(path)
               if "ansible.builtin.reboot" in task}
    assert reboots == {("host_boot", "Reboot to apply the kernel command line")}
    listeners = [(role, h["name"]) for role in ROLES for h in _tasks(PLAYBOOKS / "roles" / role / "handlers/main.yml")
                 if topic in ([h.get("listen")] if isinstance(h.get("listen"), str) else h.get("listen") or [])]
    assert listeners == [("host_boot", "Regenerate the bootloader configuration"),
                         ("host_boot", "Reboot to apply the kernel command line")]
    writers = {role for role in ROLES if topic in _notified(role)}
    assert writers == {"hugepages", "iommu", "cpu_isolation"}
    for role in writers:
        assert "host_boot" in _dependencies(role), f"{role} notifies {topic!r} without depending on host_boot"
