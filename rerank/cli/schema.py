"""Every command's options, stored with the package: ``--help`` and mistyped options answered without loading torch.

A command's parser (:class:`rerank.cli.arguments.RerankCLI`, a ``LightningCLI``) is built from the signatures of the
Trainer, :class:`~rerank.training.lightning_module.RerankModule` and
:class:`~rerank.training.datamodule.RerankDataModule`, which takes importing torch, Lightning and transformers:
several seconds before a word of help or of error. So the dispatcher (:mod:`rerank.cli`) answers from what this
module stored when the package was built:

- ``rerank <command> --help`` prints ``help/<command>.txt``, the parser's own help, captured at 80 columns;
- every ``--option`` and every key of every ``--config`` file is checked against ``schema.json`` (each option's
  kind and, for numbers, booleans and fixed choices, its type) before the command loads: an unknown key fails with
  the file and line (or the option) and the nearest known names, a value of the wrong type with the option.

Only certain mistakes are reported here; anything the stored schema cannot judge (a key inside a free-form
mapping such as ``data.collection``, a class path, a value the parser converts) is left to the parser. The stored
help is used only where the Lightning, jsonargparse and Python versions are those it was generated with (the
option names of rerank's own sections do not depend on them; the Trainer's are checked only then too).
``tests/test_cli_startup.py`` fails when the stored files differ from the parsers; regenerate them with
``python -m rerank.cli.schema``.
"""

from __future__ import annotations

import difflib
import json
import math
import platform
import re
import sys
import textwrap
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from .commands import HELP_ALL, READS
from .configs import CONFIG_OPTIONS, config_files, read_config, settings

SCHEMA = Path(__file__).with_name("schema.json")
HELP = Path(__file__).with_name("help")
HELP_COLUMNS = 80
VERSIONED = ("lightning", "jsonargparse")
"""The libraries whose versions shape the parsers' help and the Trainer's options."""
OWN_SECTIONS = ("model", "data", "pretrain", "output_dir", "checkpoint", "last_checkpoint")
"""Sections whose option names come from rerank's own code (and Lightning's checkpoint callback)."""

VALUE, GROUP, OPEN, PARSER = "value", "group", "open", "parser"
"""Kinds of option: a value (of a checked ``type`` or not), a group of known keys (a dataclass, a Trainer section),
a mapping or class whose keys are free (not checked), or one left to the parser (a link target, a help action)."""


@dataclass(frozen=True)
class Option:
    """What the stored schema knows of one option."""

    kind: str
    type: str | None = None  # int, float, bool or choice (for VALUE)
    choices: tuple[str, ...] = ()
    nullable: bool = False


def installed_versions() -> dict[str, str]:
    """The versions that the stored help depends on, as installed now."""
    found = {"python": ".".join(platform.python_version_tuple()[:2])}
    for name in VERSIONED:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


@cache
def stored() -> dict[str, Any] | None:
    """``schema.json`` as stored, or None where it is missing (a checkout that never generated it)."""
    return json.loads(SCHEMA.read_text(encoding="utf-8")) if SCHEMA.is_file() else None


def current() -> bool:
    """Whether the stored schema was generated with the installed Lightning, jsonargparse and Python."""
    schema = stored()
    return schema is not None and schema["versions"] == installed_versions()


def help_text(command: str, every: bool = False) -> str | None:
    """The command's ``--help``: the options it reads (:data:`~rerank.cli.commands.READS`), or with ``every`` all
    those its parser accepts, as the parser prints them; None where the stored text may differ from the parser's."""
    path = HELP / f"{command}.txt"
    if not (current() and path.is_file()):
        return None
    text = path.read_text(encoding="utf-8")
    return text if every or command not in READS else reading(text, command, READS[command])


ALWAYS = ("help", "config", "print_config")
"""The options every command's ``--help`` shows."""


def reading(text: str, command: str, reads: tuple[str, ...]) -> str:
    """``text`` (a parser's help) with only the option entries of ``reads`` (options and their sub-options) and of
    :data:`ALWAYS`, in their groups, under a short usage line; then how to see the rest."""
    kept = [f"usage: rerank {command} [--config CONFIG] [options below]", ""]
    blocks = text.split("\n\n")
    kept += [blocks[1], ""]  # the description
    for block in blocks[2:]:
        lines = block.splitlines()
        if not lines or lines[0].startswith(" "):
            continue
        entries: list[list[str]] = []
        for line in lines[1:]:
            if (line.startswith("  ") and not line.startswith("    ")) or not entries:
                entries.append([line])
            else:
                entries[-1].append(line)
        shown = [entry for entry in entries if _reads(entry[0], reads)]
        if shown:
            kept += [lines[0], *(line for entry in shown for line in entry), ""]
    kept.append(textwrap.fill(f"rerank {command} reads the options above; it accepts every option of the shared config "
                              f"(one YAML serves every command) and ignores the others: rerank {command} {HELP_ALL} "
                              "lists them all.", 80))
    return "\n".join(kept) + "\n"


def _reads(first_line: str, reads: tuple[str, ...]) -> bool:
    """Whether a help entry (its first line) is of an option in ``reads`` or :data:`ALWAYS`, or a positional one."""
    names = re.findall(r"--([\w.]+)", first_line)
    if not names:
        return bool(re.match(r"^  [a-z]", first_line)) and "-->" not in first_line  # a positional argument
    name = names[-1].removesuffix(".help")
    return name in ALWAYS or any(name == option or name.startswith(f"{option}.") for option in reads)


def check(command: str, argv: list[str]) -> None:
    """Fail on the certain mistakes of ``argv`` (config files resolved): unknown keys and badly typed values.

    Raises:
        ValueError: naming the option, or the config file and line, and the nearest known names.
    """
    options = _options(command)
    for path in config_files(argv):
        node = read_config(path)  # YAML syntax and encoding: checked whether or not a schema is stored
        if node is not None and options is not None:
            options.check_mapping(node, "", f"{path}:")
    if options is None:
        return
    for key, value in _command_line(argv):
        option = options.lookup(options.unabbreviated(key), f"--{key}")
        if option is not None and option.kind == VALUE and value is not None:
            _check_value(option, yaml.safe_load(value) if value.strip() else value, value, f"--{key}")


def _options(command: str) -> _Options | None:
    schema = stored()
    if schema is None or command not in schema["commands"]:
        return None
    return _Options(command, {key: Option(**{**fields, "choices": tuple(fields.get("choices", ()))})
                              for key, fields in schema["commands"][command]["options"].items()})


def _command_line(argv: list[str]) -> list[tuple[str, str | None]]:
    """``(key, value)`` of every ``--key value`` / ``--key=value`` of ``argv`` but config files (value None when
    the next word is another option)."""
    found = []
    for position, argument in enumerate(argv):
        if not argument.startswith("--") or argument in CONFIG_OPTIONS or argument.startswith("--config="):
            continue
        key, equals, value = argument[2:].partition("=")
        if not equals:
            following = argv[position + 1] if position + 1 < len(argv) else None
            value = None if following is None or following.startswith("--") else following
        found.append((key.rstrip("+"), value))
    return found


@dataclass(frozen=True)
class _Options:
    """One command's stored options."""

    command: str
    options: dict[str, Option]

    def unabbreviated(self, key: str) -> str:
        """The option a command-line ``key`` names: itself, or the one option it begins (argparse takes unique
        abbreviations: ``--trainer.max_epoch`` is ``--trainer.max_epochs``)."""
        starting = [name for name in self.options if name.startswith(key)]
        return starting[0] if key not in self.options and len(starting) == 1 else key

    def lookup(self, key: str, where: str) -> Option | None:
        """The option ``key`` names, None when it lies inside a free-form one (or is left to the parser); a
        ValueError when no option has that name."""
        if key in self.options:
            return self.options[key]
        parts = key.split(".")
        for end in range(len(parts) - 1, 0, -1):
            parent = self.options.get(".".join(parts[:end]))
            if parent is not None and parent.kind in (OPEN, PARSER):
                return None
        if parts[0] not in OWN_SECTIONS and not current():
            return None  # another Lightning may have this Trainer option: the parser knows
        raise ValueError(self._unknown(key, where))

    def _unknown(self, key: str, where: str) -> str:
        message = f"{where}: unknown option {key!r}"
        known = [name for name, option in self.options.items() if option.kind != PARSER]
        near = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        return f"{message}{hint} (rerank {self.command} --help lists the options)"

    def check_mapping(self, node: yaml.MappingNode, prefix: str, where: str) -> None:
        """Check the keys (and typed values) of a config file's mapping; ``where`` is ``file:``."""
        for setting, value_node in settings(node, prefix):
            place = f"{where}{setting.line}"
            option = self.lookup(setting.key, place)
            if option is None:
                continue
            if option.kind == GROUP and isinstance(value_node, yaml.MappingNode):
                self.check_mapping(value_node, f"{setting.key}.", where)
            elif option.kind == VALUE and isinstance(value_node, yaml.ScalarNode):
                _check_value(option, setting.value, value_node.value, f"{place}: {setting.key}")


EXPECTED = {"int": "an integer", "float": "a finite number", "bool": "true or false"}


def _check_value(option: Option, value: Any, text: str, where: str) -> None:
    """Fail where the parser certainly would: ``value`` (as YAML reads it; ``text`` as written) is not of the
    option's type."""
    if option.type is None or (value is None and option.nullable) or str(value) in option.choices:
        return
    if option.type == "int":
        valid = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and _is(int, text))
    elif option.type == "float":
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else (
            float(text) if _is(float, text) else None)
        valid = number is not None and math.isfinite(number)
    elif option.type == "bool":
        valid = isinstance(value, bool)
    else:
        valid = False
    if not valid:
        expected = " or ".join([*([EXPECTED[option.type]] if option.type in EXPECTED else []),
                                *([f"one of {', '.join(option.choices)}"] if option.choices else [])])
        raise ValueError(f"{where}: expected {expected}{' or null' if option.nullable else ''}; got {text!r}")


def _is(kind: type, text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


# Generation: imports every command and its libraries.

def generate() -> dict[str, Any]:
    """Every command's options and help text, each read from its parser in a fresh interpreter (the help lists
    the subclasses loaded, as a user's ``rerank <command> --help`` would: only what that command imports)."""
    import subprocess

    from .commands import COMMANDS

    commands = {}
    for command in COMMANDS:
        done = subprocess.run([sys.executable, "-m", "rerank.cli.schema", "--command", command], capture_output=True,
                              text=True, check=True)
        commands[command] = json.loads(done.stdout)
    return {"versions": installed_versions(), "commands": commands}


def generate_command(command: str) -> dict[str, Any]:
    """One command's options and help text, read from its parser (imports torch, Lightning, transformers)."""
    parser, text = _parser_and_help(command)
    return {"help": text, "options": {key: _fields(option) for key, option in sorted(_parser_options(parser).items())}}


def write(generated: dict[str, Any]) -> None:
    """Store ``generated`` as ``schema.json`` and ``help/<command>.txt``."""
    HELP.mkdir(exist_ok=True)
    for command, entry in generated["commands"].items():
        (HELP / f"{command}.txt").write_text(entry["help"], encoding="utf-8")
    commands = [f'  "{command}": {{"options": {{\n' + ",\n".join(
        f"    {json.dumps(key)}: {json.dumps(fields)}" for key, fields in entry["options"].items()) + "\n  }}"
        for command, entry in generated["commands"].items()]
    text = f'{{"versions": {json.dumps(generated["versions"])},\n "commands": {{\n' + ",\n".join(commands) + "\n}}\n"
    SCHEMA.write_text(text, encoding="utf-8")


def _fields(option: Option) -> dict[str, Any]:
    fields: dict[str, Any] = {"kind": option.kind}
    if option.type is not None:
        fields["type"] = option.type
    if option.choices:
        fields["choices"] = list(option.choices)
    if option.nullable:
        fields["nullable"] = True
    return fields


def _parser_and_help(command: str) -> tuple[Any, str]:
    """The command's parser and its ``--help`` text, by running the command with ``--help``."""
    import contextlib
    import importlib
    import io
    import os

    import jsonargparse

    from .commands import MODULES

    module = importlib.import_module(f"rerank.cli.{MODULES.get(command, command)}")
    printed: list[Any] = []
    original = jsonargparse.ArgumentParser.print_help

    def print_help(self: Any, file: Any = None) -> None:
        printed.append(self)
        original(self, file)

    output, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    jsonargparse.ArgumentParser.print_help = print_help
    try:
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            module.main(["--help"])
    finally:
        jsonargparse.ArgumentParser.print_help = original
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return printed[0], output.getvalue()


def _parser_options(parser: Any) -> dict[str, Option]:
    """Every option key of a jsonargparse parser, with what the schema checks of it."""
    from jsonargparse import ActionConfigFile

    options: dict[str, Option] = {}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, ActionConfigFile) or action.dest in ("help",):
            continue
        name = type(action).__name__
        if name == "ActionLink" or action.dest.endswith(".help") or name.startswith("_ActionPrint"):
            options[action.dest] = Option(PARSER)
        elif name == "_ActionConfigLoad":
            options[action.dest] = Option(GROUP)
        elif hasattr(action, "_typehint"):
            options.update(_typed(action.dest, action._typehint))
        else:
            options[action.dest] = Option(PARSER)
    return options


def _typed(key: str, hint: Any) -> dict[str, Option]:
    """The option ``key`` of type ``hint``, and the fields below it when ``hint`` is a dataclass."""
    import dataclasses
    import typing

    arguments = [argument for argument in typing.get_args(hint)] if _is_union(hint) else [hint]
    nullable = type(None) in arguments
    arguments = [argument for argument in arguments if argument is not type(None)]
    if len(arguments) == 1 and dataclasses.is_dataclass(arguments[0]):
        found = {key: Option(GROUP, nullable=nullable)}
        for field in dataclasses.fields(arguments[0]):
            field_hint = typing.get_type_hints(arguments[0])[field.name]
            found.update(_typed(f"{key}.{field.name}", field_hint))
        return found
    scalar = {int: "int", float: "float", bool: "bool"}
    literals = [argument for argument in arguments if typing.get_origin(argument) is typing.Literal]
    others = [argument for argument in arguments if argument not in literals]
    if len(others) <= 1 and all(argument in scalar for argument in others) and (others or literals):
        choices = tuple(dict.fromkeys(str(choice) for argument in literals for choice in typing.get_args(argument)))
        return {key: Option(VALUE, scalar[others[0]] if others else "choice", choices, nullable)}
    if all(argument is str for argument in arguments):
        return {key: Option(VALUE, nullable=nullable)}
    return {key: Option(OPEN, nullable=nullable)}


def _is_union(hint: Any) -> bool:
    import types
    import typing

    return typing.get_origin(hint) in (typing.Union, types.UnionType)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--command"]:
        print(json.dumps(generate_command(sys.argv[2])))
    else:
        write(generate())
        print(f"wrote {SCHEMA} and {HELP}/*.txt", file=sys.stderr)
