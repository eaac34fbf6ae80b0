"""Keyword arguments as dp's flags, through the CLI's own flag table (tools/dp/flags/flag_table.cpp): a
keyword is its flag's name in snake_case (`loss_scale` for --loss-scale), with the flag's kind, default,
checks and messages. A call's keywords become the command line dp parses in this process, so a setting
means, defaults and fails exactly as on the command line."""
import difflib
import json
import numbers
import os

from dp_engine import _core

_rows = None


def _table():
    global _rows
    if _rows is None:
        _rows = _core.flag_rows()
    return _rows


def rows(command):
    """{keyword: row} of the flags `command` takes (each row: flag, kind, help, ...)."""
    found = {}
    for row in _table():
        if command in row["commands"] or command in row["hidden_in"]:
            found.setdefault(row["keyword"], row)
    return found


def defaults(command):
    """{keyword: default} of `command`, as dp's checkpoints record settings."""
    return json.loads(_core.defaults(command))


def check_keywords(function, command, given, own=()):
    """TypeError naming an unknown keyword and the closest known one, as Python does for a function's."""
    known = set(rows(command)) | set(own)
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            raise TypeError(f"{function}() got an unexpected keyword argument '{key}'"
                            + (f"; did you mean '{close[0]}'?" if close else ""))


def argv_for(command, settings):
    """The flags for `settings` ({keyword: value}; None leaves a flag out), in the order given."""
    table = rows(command)
    argv = []
    for key, value in settings.items():
        if value is None:
            continue
        row = table[key]
        flag, kind = row["flag"], row["kind"]
        where = f"{key}={value!r}"
        if kind == "switch":
            if not isinstance(value, bool):
                raise TypeError(f"{where}: {key} is a switch: True or False")
            if value:
                argv.append(flag)
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{where}: {key} takes a whole number")
            argv += [flag, str(int(value))]
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{where}: {key} takes a number")
            argv += [flag, repr(float(value))]
        elif kind == "floats":
            if isinstance(value, (str, bytes)) or not all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                                          for v in value):
                raise TypeError(f"{where}: {key} takes a list of numbers")
            argv += [flag, ",".join(repr(float(v)) for v in value)]
        else:  # text: words, a path, or a number the flag takes as text (--loader-threads 4)
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            elif isinstance(value, numbers.Number) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str):
                raise TypeError(f"{where}: {key} takes text")
            argv += [flag, value]
    return argv
