"""The parts of a C++ declaration (type, declarators, specifiers, parameters) read from its
tree-sitter node.

Each part is read by position instead of by field name where it can be (``child_by_field_name`` is
the costly call of the C++ facts).  A shortcut applies only where the grammar leaves one reading:
an error-free node whose children have the exact shape named; anything else takes the field
lookups.
"""

from __future__ import annotations

import re

import tree_sitter as ts

from .parser import compact, declarator_parts, text
from .records import Param

_TENSOR_TYPE = re.compile(r"^(const)?(torch::|at::)?Tensor&?$")
_ACCESSOR_TYPE = re.compile(r"(Packed)?TensorAccessor|GenericPackedTensorAccessor")


# node types that are only ever a declaration's type specifier, never a modifier or a declarator:
# the first child of one of these types that follows the leading modifiers is the ``type`` field
_TYPE_SPECIFIERS = frozenset({"primitive_type", "type_identifier", "sized_type_specifier",
                              "placeholder_type_specifier", "template_type"})


def type_field(node: ts.Node, kids: list[ts.Node], i: int, first: ts.Node) -> tuple[ts.Node | None, int]:
    """The ``type`` of a declaration whose first child after its leading modifiers is
    ``first`` (``kids[i]``), and that child's index when it is the type (-1 otherwise)."""
    if first.type in _TYPE_SPECIFIERS and not node.has_error:
        return first, i
    return node.child_by_field_name("type"), -1


def declarators(node: ts.Node, kids: list[ts.Node], type_at: int) -> list[ts.Node]:
    """A declaration's ``declarator`` children: ``type x;`` (the type then exactly one child and
    the ``;``) has one, the child after the type (a declaration needs at least one declarator, so
    in an error-free node that child is it)."""
    if type_at >= 0 and len(kids) == type_at + 3:
        only, last = kids[type_at + 1], kids[type_at + 2]
        if last.type == ";" and only.type != "comment":
            return [only]
    return node.children_by_field_name("declarator")


def init_parts(decl: ts.Node) -> tuple[ts.Node | None, ts.Node | None]:
    """``declarator`` and ``value`` of an init_declarator: ``x = v`` or ``x{v}`` / ``x(v)``;
    both are required, so with no room left for anything else they are read by position."""
    if not decl.has_error:
        kids = decl.children
        n = len(kids)
        if n == 3 and kids[1].type == "=":
            return kids[0], kids[2]
        if n == 2 and kids[0].type != "comment" and kids[1].type != "comment":
            return kids[0], kids[1]
    return decl.child_by_field_name("declarator"), decl.child_by_field_name("value")


def specifiers(node: ts.Node) -> set[str]:
    """Storage classes, qualifiers and CUDA execution-space tokens of a declaration or definition."""
    out: set[str] = set()
    for c in node.children:
        t = c.type
        if t in ("storage_class_specifier", "type_qualifier", "virtual_specifier"):
            out.add(compact(c))
        elif t.startswith("__") or t in ("static", "inline", "extern", "constexpr"):
            out.add(t)
        elif t == "attribute_declaration" or t == "launch_bounds":
            continue
    return out


def function_declarator(decl: ts.Node | None) -> ts.Node | None:
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    return decl


def is_function_declarator(decl: ts.Node) -> bool:
    return function_declarator(decl) is not None


def params_of(plist: ts.Node | None) -> tuple[Param, ...]:
    if plist is None:
        return ()
    out: list[Param] = []
    for p in plist.named_children:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        kids = p.children
        type_node, decl, const_seen = param_parts(p, kids)
        name_node, suffix = declarator_parts(decl)
        name = text(name_node) if name_node is not None else ""
        ptype = compact(type_node)
        # both patterns need "Tensor" in the type: most parameters (``float*``, ``int``) skip them
        tensor_named = "Tensor" in ptype
        is_tensor = tensor_named and (bool(_TENSOR_TYPE.match(ptype)) or
                                      ptype in ("torch::Tensor", "at::Tensor", "Tensor"))
        pointer = "*" in suffix or "[]" in suffix or (tensor_named and bool(_ACCESSOR_TYPE.search(ptype)))
        # ``const float* x`` is a pointer to const; ``float* const x`` is a const pointer (storable).
        # A qualifier node is its one keyword, so its bytes compare as its compacted text would
        # (``param_parts`` already looked at every child when it read the common shape by position)
        const = ("*" in suffix or not pointer) and (
            const_seen if const_seen is not None else
            any(c.type == "type_qualifier" and c.text == b"const" for c in kids))
        out.append(Param(name, len(out), ptype + suffix, pointer, const, is_tensor))
    return tuple(out)


# declarator node types of a parameter: none of them is ever a modifier, so one of these as the
# only child after the type is the ``declarator`` field
_PARAM_DECLARATORS = frozenset({"identifier", "pointer_declarator", "reference_declarator", "array_declarator",
                                "abstract_pointer_declarator", "abstract_reference_declarator",
                                "abstract_array_declarator"})


_MODIFIERS = ("storage_class_specifier", "type_qualifier", "comment")


def param_parts(p: ts.Node, kids: list[ts.Node]) -> tuple[ts.Node | None, ts.Node | None, bool | None]:
    """``type`` and ``declarator`` of a parameter declaration, by position for the common shapes
    (leading qualifiers, the type, then nothing or one declarator) of an error-free node; and
    whether a child is the qualifier ``const``, known in those shapes (every child but the type
    and the declarator was a leading modifier looked at here), None otherwise."""
    if not p.has_error:
        const = False
        for i, c in enumerate(kids):
            t = c.type
            if t in _MODIFIERS:
                if t == "type_qualifier" and c.text == b"const":
                    const = True
                continue
            if t in _TYPE_SPECIFIERS:
                rest = len(kids) - i - 1
                if rest == 0:
                    return c, None, const
                if rest == 1 and kids[i + 1].type in _PARAM_DECLARATORS:
                    return c, kids[i + 1], const
            break
    return p.child_by_field_name("type"), p.child_by_field_name("declarator"), None
