"""Obfuscation (TAXONOMY class 19): code the static stage cannot read, by construction.

``exec`` of a decoded blob, an import whose module name is computed, a shell command that installs
packages or builds a library, a prebuilt ``.so`` loaded through ctypes: each hides the code that
actually runs from any reader, human or hackscan.  These checks find the constructs themselves;
what the hidden code does is for the dynamic stage (and a sandbox) to find out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Severity
from ...python.patterns import object_names

_EXEC_BUILTINS = {"exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile"}
_DECODERS = {
    "base64.b64decode", "base64.b32decode", "base64.b16decode", "base64.a85decode", "base64.b85decode",
    "base64.urlsafe_b64decode", "base64.standard_b64decode", "base64.decodebytes", "base64.decodestring",
    "codecs.decode", "zlib.decompress", "bz2.decompress", "lzma.decompress", "gzip.decompress",
    "binascii.unhexlify", "binascii.a2b_base64", "binascii.a2b_hex", "binascii.a2b_uu", "bytes.fromhex",
    "bytearray.fromhex", "marshal.loads", "pickle.loads", "dill.loads", "cloudpickle.loads", "_pickle.loads",
}
# deserialisers that run code on their own
_CODE_LOADERS = {"marshal.loads", "pickle.loads", "dill.loads", "cloudpickle.loads", "_pickle.loads"}
_SINK_NAMES = _EXEC_BUILTINS | {
    "__import__", "builtins.__import__", "importlib.import_module", "types.FunctionType", "types.CodeType",
    "torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load", "cupy.RawKernel",
    "cupy.RawModule", "ctypes.CDLL", "marshal.loads", "pickle.loads",
}
_IMPORTERS = {"__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__"}
_SHELL = {
    "os.system", "os.popen", "os.execv", "os.execve", "os.execvp", "os.execvpe", "os.execl", "os.execle",
    "os.execlp", "os.execlpe", "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnl", "os.spawnlp",
    "os.posix_spawn", "os.posix_spawnp", "subprocess.run", "subprocess.call", "subprocess.check_call",
    "subprocess.check_output", "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput",
    "pty.spawn", "pip.main", "pip._internal.main", "pip._internal.cli.main.main", "commands.getoutput",
}
_SHELL_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in _SHELL) | {"system"}
# read-only queries some candidates make to pick an architecture flag
_BENIGN_COMMANDS = re.compile(r"^\s*\[?\s*['\"]?(nvidia-smi|uname|nproc|lscpu|hostname|which)\b")
_NVCC_VERSION = re.compile(r"nvcc['\",\s]+(--version|-V)\b")
_LIB_LOADERS = {
    "ctypes.CDLL", "ctypes.PyDLL", "ctypes.WinDLL", "ctypes.OleDLL", "ctypes.cdll.LoadLibrary",
    "ctypes.pydll.LoadLibrary", "ctypes.windll.LoadLibrary", "ctypes.LibraryLoader",
    "torch.ops.load_library", "torch.classes.load_library", "numpy.ctypeslib.load_library",
    "importlib.machinery.ExtensionFileLoader", "cffi.FFI.dlopen", "cppyy.load_library",
}
_LIB_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in _LIB_LOADERS) | {"dlopen", "LoadLibrary", "RawModule"}
_SYSTEM_LIBS = re.compile(r"(^|/)lib(cuda|cudart|cublas|cublasLt|nvrtc|nvidia-ml|cudnn|c|m|dl|pthread|rt|stdc\+\+)"
                          r"(\.so|\.dylib|\.dll|[-.]\d|$)")


def _builtin_called(host, call: ast.Call, names: set[str]) -> str:
    """The builtin a call invokes, '' when the name is shadowed by an import (``from re import compile``)."""
    f = call.func
    if isinstance(f, ast.Name):
        if f.id in host.imports.aliases or _shadowed(host, call, f.id):
            return ""
        return f.id if f.id in names else ""
    name = host.canonical(f)
    return name if name in names else ""


_EXEC_NAMES = ("exec", "eval", "compile")


def _shadowed(host, node: ast.AST, name: str) -> bool:
    """``name`` at ``node`` is the file's own: a def, class, assignment or import in an enclosing
    scope, or a parameter of an enclosing function.  A local ``def compile(...)`` is not the builtin."""
    bound = host.scope_of(node).lookup(name, getattr(node, "lineno", 0))
    if bound is not None:
        # ``eval = builtins.eval`` / ``getattr(builtins, "eval")`` rebinds the builtin itself
        return not any(isinstance(n, ast.Name) and n.id in ("builtins", "__builtins__", *_EXEC_NAMES)
                       for n in ast.walk(bound[0]) if bound[1] != "def")
    for fn in host.ancestors(node):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = fn.args
            if any(p.arg == name for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p):
                return True
    return False


def dynamic_code_execution(ctx: ScanContext) -> Iterator[Hit]:
    """HS190: exec / eval / compile of anything but a plain literal (a literal is a warning)."""
    host = ctx.host
    if host is None or not ctx.patterns.uses("exec", "eval", "compile"):
        return
    for call in ctx.patterns.calls_named("exec", "eval", "compile"):
        if isinstance(call.func, ast.Name):
            which = _builtin_called(host, call, {"exec", "eval", "compile"})
        else:
            which = host.canonical(call.func)  # builtins.exec(...)
        if which not in _EXEC_BUILTINS or not call.args:
            continue
        arg = call.args[0]
        fn = which.rsplit(".", 1)[-1]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield ctx.hit(ctx.at(call), args={"fn": fn, "what": "a string literal"}, severity=Severity.WARNING,
                          evidence={"literal": True})
        else:
            yield ctx.hit(ctx.at(call), args={"fn": fn, "what": "code assembled at run time"},
                          evidence={"literal": False})


_DECODER_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in _DECODERS) | {"decode", "fromhex"}


def _decode_calls(host, facts) -> list[tuple[ast.Call, str]]:
    out = []
    for call in facts.calls_named(*_DECODER_ATTRS):
        name = facts.cname(call)
        if name in _DECODERS:
            out.append((call, name))
        elif isinstance(call.func, ast.Attribute) and call.func.attr in ("fromhex",) and host.canonical(
                call.func.value) in ("bytes", "bytearray"):
            out.append((call, "bytes.fromhex"))
        elif isinstance(call.func, ast.Attribute) and call.func.attr == "decode" and call.args and isinstance(
                call.args[0], ast.Constant) and str(call.args[0].value).lower().replace("-", "_") in (
                "rot13", "rot_13", "base64", "hex", "zlib", "bz2", "uu", "base64_codec", "hex_codec", "zlib_codec"):
            out.append((call, f"str.decode({call.args[0].value!r})"))
    return out


def _sink_of(host, node: ast.AST) -> str:
    name = host.canonical(node.func) if isinstance(node, ast.Call) else ""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in host.imports.aliases:
        return name if name in _SINK_NAMES else ""
    if name in _SINK_NAMES or name.endswith(("cpp_extension.load_inline", "cpp_extension.load")):
        return name
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "write", "write_text", "write_bytes", "exec_module"):
        return f".{node.func.attr}()"
    return ""


def encoded_payload(ctx: ScanContext) -> Iterator[Hit]:
    """HS191: base64 / zlib / codecs / marshal decoding whose result reaches exec, an import or a compiler."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_DECODER_ATTRS):
        return
    for call, name in _decode_calls(host, facts):
        if name in _CODE_LOADERS:
            yield ctx.hit(ctx.at(call), args={"decoder": name, "sink": "itself (it runs code while loading)"},
                          evidence={"decoder": name})
            continue
        sink = ""
        # directly nested: exec(zlib.decompress(base64.b64decode(B)))
        for anc in host.ancestors(call):
            if isinstance(anc, ast.Call):
                sink = _sink_of(host, anc)
                if sink:
                    break
            if isinstance(anc, (ast.stmt,)):
                break
        if not sink:
            sink = _sink_through_names(host, facts, call)
        if sink:
            yield ctx.hit(ctx.at(call), args={"decoder": name, "sink": sink}, evidence={"decoder": name, "sink": sink})
        else:
            yield ctx.hit(ctx.at(call), message=f"decodes an embedded blob with {name}; what it holds is not analysed",
                          severity=Severity.WARNING, evidence={"decoder": name})


def _sink_through_names(host, facts, call: ast.Call) -> str:
    """Follow the decoded value through local assignments to a sink in the same function."""
    owner = facts.owner(call)
    stmt = next((a for a in host.ancestors(call) if isinstance(a, (ast.Assign, ast.AnnAssign))), None)
    if stmt is None:
        return ""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    if not names:
        return ""
    flow = facts.flow(owner) if owner is not None else None
    if flow is not None:
        names = set(facts.value_taint(owner, names))
    else:  # module level: one step of propagation through module assignments
        for node in host.tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.value)):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for c in facts.nodes_by_owner(ast.Call).get(owner, ()):
        sink = _sink_of(host, c)
        if not sink:
            continue
        args = list(c.args) + [k.value for k in c.keywords]
        if any(isinstance(n, ast.Name) and n.id in names for a in args for n in ast.walk(a)):
            return sink
    return ""


def computed_import(ctx: ScanContext) -> Iterator[Hit]:
    """HS192: __import__ / importlib.import_module of a name built at run time; modules executed from files."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("__import__", "import_module", "exec_module"):
        return
    names = object_names(facts)
    for call in facts.calls_named("__import__", "import_module", "exec_module"):
        name = facts.cname(call)
        if isinstance(call.func, ast.Name) and call.func.id == "__import__" and "__import__" not in host.imports.aliases:
            name = "__import__"
        if name in _IMPORTERS and call.args:
            arg = call.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                continue
            folded = names.fold_text(arg, facts.owner(call))
            shown = f"'{folded}', assembled from pieces" if folded is not None else "a name computed at run time"
            yield ctx.hit(ctx.at(call), args={"fn": name, "what": shown}, evidence={"folded": folded})
        elif isinstance(call.func, ast.Attribute) and call.func.attr == "exec_module":
            yield ctx.hit(ctx.at(call), message="executes a module loaded from a file at run time (loader.exec_module); "
                          "its code is not analysed", evidence={"call": "exec_module"})


def _command_text(host, facts, call: ast.Call) -> str | None:
    if not call.args:
        return None
    names = object_names(facts)
    arg = call.args[0]
    owner = facts.owner(call)
    text = names.fold_text(arg, owner)
    if text is not None:
        return text
    v = host.resolver.try_value(arg, host.scope_of(arg), arg.lineno)
    if isinstance(v, list):
        parts = [getattr(x, "text", x) for x in v]
        if all(isinstance(p, (str, int, float)) for p in parts):
            return " ".join(str(p) for p in parts)
    return None


def runtime_shell_command(ctx: ScanContext) -> Iterator[Hit]:
    """HS193: shell commands, subprocesses and pip installs run by the candidate."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_SHELL_ATTRS):
        return
    for call in facts.calls_named(*_SHELL_ATTRS):
        name = facts.cname(call)
        if name not in _SHELL and not (isinstance(call.func, ast.Attribute) and call.func.attr == "system"
                                       and host.canonical(call.func.value).endswith("get_ipython()")):
            continue
        cmd = _command_text(host, facts, call)
        if cmd is not None and (_BENIGN_COMMANDS.match(cmd) or _NVCC_VERSION.search(cmd)) and not re.search(
                r"[;&|`$]", cmd):
            yield ctx.hit(ctx.at(call), args={"fn": name, "cmd": cmd[:80]}, severity=Severity.WARNING,
                          evidence={"command": cmd})
            continue
        shown = cmd[:80] if cmd is not None else "a command built at run time"
        yield ctx.hit(ctx.at(call), args={"fn": name, "cmd": shown}, evidence={"command": cmd})


def foreign_library_load(ctx: ScanContext) -> Iterator[Hit]:
    """HS194: shared libraries loaded through ctypes / torch.ops.load_library / cupy module files."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_LIB_ATTRS, "cdll", "pydll"):
        return
    names = object_names(facts)
    for call in facts.calls_named(*_LIB_ATTRS):
        name = facts.cname(call)
        path_expr: ast.AST | None = None
        if name in _LIB_LOADERS or (isinstance(call.func, ast.Attribute) and call.func.attr in ("dlopen", "LoadLibrary")):
            path_expr = call.args[0] if call.args else None
        elif name in ("cupy.RawModule",) and any(k.arg == "path" for k in call.keywords):
            path_expr = next(k.value for k in call.keywords if k.arg == "path")
        elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Attribute) and \
                host.canonical(call.func.value) in ("ctypes.cdll", "ctypes.pydll") and call.func.attr != "LoadLibrary":
            continue
        else:
            continue
        owner = facts.owner(call)
        lib = names.fold_text(path_expr, owner) if path_expr is not None else None
        if lib is None and isinstance(path_expr, ast.Call) and host.canonical(path_expr.func) == "ctypes.util.find_library":
            found = names.fold_text(path_expr.args[0], owner) if path_expr.args else None
            lib = f"lib{found}.so" if found else None
        if lib is not None and _SYSTEM_LIBS.search(lib):
            yield ctx.hit(ctx.at(call), args={"fn": name or "dlopen", "lib": lib}, severity=Severity.WARNING,
                          message=f"loads the system library {lib} with {name or 'dlopen'}: calls through it "
                                  "(raw CUDA API) bypass what the static stage can see",
                          evidence={"library": lib})
            continue
        yield ctx.hit(ctx.at(call), args={"fn": name or "dlopen", "lib": lib or "a path computed at run time"},
                      evidence={"library": lib})
