"""Records: dltune's data classes (a snapshot's parts, results, plans, histories), declared as
dataclasses are and built in a small part of the time ``dataclasses.dataclass`` takes.

Why not ``@dataclass``: it compiles each method it generates with ``exec`` when the class is created,
about 1 ms a class on a 2-core node. The audit's modules declare over 50 data classes: 75 ms of a
300 ms ``dltune audit``, which Slurm runs on every node every few minutes (issue 46; the figures are
in benchmarks/audit_speed.py). A record's ``__repr__``, ``__eq__`` and ``__hash__`` are shared
functions that read the class's fields, and its ``__init__`` is compiled on the class's first
instance: a class that a run never instantiates costs nothing, and one it does costs one small
compile, not six.

What a record keeps of a dataclass, and tests/unit/test_records.py holds it to: the same ``__init__``
(positional or keyword, defaults, ``field(default_factory=...)``, the same errors for a missing or
unknown argument), ``__repr__``, ``__eq__`` (the same class, its compared fields in order;
``field(compare=False)`` left out), ``__hash__`` (frozen: of the compared fields; mutable:
unhashable), frozen instances (``dataclasses.FrozenInstanceError`` on assignment or deletion),
``__match_args__``, and ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass``, through a
``__dataclass_fields__`` built when something first reads it (that imports ``dataclasses``, which
the audit itself never needs), ``copy.replace`` (3.13+), and ``replace`` here, which mypy checks as
``dataclasses.replace``. What dataclasses refuse is refused alike (a mutable record inheriting a
frozen one or the reverse, a ``field()`` without an annotation, a frozen record's own
``__setattr__``, an unhashable default), and what dltune does not use is refused where it is
declared, never silently different: ``ClassVar`` and ``InitVar`` fields, ``__post_init__``. One
difference is left: before a class's first instance, ``inspect.signature`` of it reads
``(*args, **kwargs)`` (nothing in dltune asks).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_kwargs: Any) -> Callable[[Any], Any]:
        """typing.dataclass_transform is for type checkers only (and Python 3.11+)."""
        return lambda decorated: decorated


T = TypeVar("T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no default>"


MISSING: Any = _Missing()
_UNSUPPORTED_ANNOTATIONS = ("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")


class Field:
    """One field of a record: from its annotation and ``field(...)``, in declaration order."""

    __slots__ = ("annotation", "compare", "default", "default_factory", "name", "repr")

    def __init__(
        self,
        name: str = "",
        annotation: Any = None,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        compare: bool = True,
        repr: bool = True,
    ) -> None:
        self.name, self.annotation = name, annotation
        self.default, self.default_factory = default, default_factory
        self.compare, self.repr = compare, repr

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.default_factory is MISSING


@overload
def field(*, default: T, compare: bool = ..., repr: bool = ...) -> T: ...
@overload
def field(*, default_factory: Callable[[], T], compare: bool = ..., repr: bool = ...) -> T: ...
def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    compare: bool = True,
    repr: bool = True,
) -> Any:
    """A field's default, default factory, and whether it is compared and shown (as dataclasses.field)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default=default, default_factory=default_factory, compare=compare, repr=repr)


@overload
@dataclass_transform(field_specifiers=(field, Field))
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...
def record(cls: Any = None, /, *, frozen: bool = False) -> Any:
    """``@record`` or ``@record(frozen=True)`` over a class body that declares its fields as
    ``@dataclass`` does."""

    def build(cls: type[T]) -> type[T]:
        built: type[T] = _build(cls, frozen)
        return built

    return build if cls is None else build(cls)


# long: dataclasses' _process_class in the same order (fields, their checks, the methods), in one place
def _build(cls: Any, frozen: bool) -> Any:
    where = f"record {cls.__module__}.{cls.__qualname__}"
    own = cls.__dict__
    if "__post_init__" in own:
        raise TypeError(f"{where}: __post_init__ is not supported (use a function that builds it)")
    fields: dict[str, Field] = {}
    bases = [base for base in cls.__mro__[-1:0:-1] if "__record_fields__" in base.__dict__]
    for base in bases:
        for inherited in base.__record_fields__:
            fields[inherited.name] = inherited
    if bases and any(base.__record_frozen__ for base in bases) != frozen:
        # As dataclasses refuse it: instances of one would be half frozen.
        raise TypeError(f"{where}: cannot inherit a {'mutable' if frozen else 'frozen'} record")
    # The class's own annotations (Python 3.10+ gives a class without any an empty dict, never a
    # base's); strings, under `from __future__ import annotations`.
    annotations = cls.__annotations__
    for name, value in own.items():
        if isinstance(value, Field) and name not in annotations:
            raise TypeError(f"{where}: {name!r} is a field but has no type annotation")
    for name, annotation in annotations.items():
        if str(annotation).startswith(_UNSUPPORTED_ANNOTATIONS):
            raise TypeError(f"{where}: field {name!r}: {annotation} is not supported")
        declared = own.get(name, MISSING)
        spec = declared if isinstance(declared, Field) else Field(default=declared)
        # dataclasses' rule (3.11+): a default shared by every instance must not be mutable, which an
        # unhashable one may be.
        if spec.default is not MISSING and type(spec.default).__hash__ is None:
            raise ValueError(
                f"{where}: mutable default {type(spec.default)} for field {name} is not allowed: "
                "use default_factory"
            )
        spec.name, spec.annotation = name, annotation
        fields[name] = spec
        # As dataclasses leave it: the class attribute is a plain default, and nothing for a factory.
        if spec.default is not MISSING:
            setattr(cls, name, spec.default)
        elif name in own:
            delattr(cls, name)
    defaulted = None
    for spec in fields.values():
        if not spec.required:
            defaulted = spec.name
        elif defaulted is not None:
            raise TypeError(f"{where}: non-default argument {spec.name!r} follows default argument")
    if frozen:
        for method in ("__setattr__", "__delattr__"):
            if method in own:
                raise TypeError(f"{where}: a frozen record cannot have its own {method}")
    compared = tuple(spec.name for spec in fields.values() if spec.compare)
    cls.__record_fields__ = tuple(fields.values())
    cls.__record_frozen__ = frozen
    cls.__record_key__ = _key_of(compared)
    # dataclasses' rule for eq=True: a __hash__ of the class's own stays (a body defining __eq__ gets
    # __hash__ = None from Python, which is not its own); else frozen hashes its compared fields and
    # mutable is unhashable. Decided before __eq__ is set below (``own`` is the class's live dict).
    class_hash = own.get("__hash__", MISSING)
    own_hash = not (class_hash is MISSING or (class_hash is None and "__eq__" in own))
    if "__init__" not in own:
        cls.__init__ = _first_init(cls)
    if "__repr__" not in own:
        cls.__repr__ = _repr
    if "__eq__" not in own:
        cls.__eq__ = _eq
    if not own_hash:
        cls.__hash__ = _hash if frozen else None
    if frozen:
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
    if "__match_args__" not in own:
        setattr(cls, "__match_args__", tuple(fields))  # noqa: B010 - mypy refuses the plain assignment
    if "__replace__" not in own:
        cls.__replace__ = replace  # copy.replace (Python 3.13+), as dataclasses give it
    cls.__dataclass_fields__ = _DataclassFields()
    return cls


def _key_of(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The compared fields' values as one tuple (as dataclasses compare them)."""
    if not names:
        return lambda _instance: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda instance: (one(instance),)
    return operator.attrgetter(*names)  # a tuple for 2+ names


def _first_init(cls: Any) -> Callable[..., None]:
    """The class's __init__ until its first instance: compile the real one, put it in place, run it."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init = _compile_init(cls)
        type.__setattr__(cls, "__init__", init)
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _compile_init(cls: Any) -> Callable[..., None]:
    """An __init__ with the fields as its parameters, in order (the signature dataclasses give)."""
    namespace: dict[str, Any] = {"__dltune_missing": MISSING, "__dltune_set": object.__setattr__}
    parameters, body = [], []
    for index, spec in enumerate(cls.__record_fields__):
        name, value = spec.name, spec.name
        if spec.default is not MISSING:
            namespace[f"__dltune_default_{index}"] = spec.default
            parameters.append(f"{name}=__dltune_default_{index}")
        elif spec.default_factory is not MISSING:
            namespace[f"__dltune_factory_{index}"] = spec.default_factory
            parameters.append(f"{name}=__dltune_missing")
            value = f"__dltune_factory_{index}() if {name} is __dltune_missing else {name}"
        else:
            parameters.append(name)
        body.append(
            f"  __dltune_set(self, {name!r}, {value})"
            if cls.__record_frozen__
            else f"  self.{name} = {value}"
        )
    source = f"def __init__(self, {', '.join(parameters)}):\n" + ("\n".join(body) or "  pass") + "\n"
    exec(compile(source, f"<record {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - our own source
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


def _repr(self: Any) -> str:
    shown = ", ".join(
        f"{spec.name}={getattr(self, spec.name)!r}" for spec in type(self).__record_fields__ if spec.repr
    )
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__class__.__record_key__
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(type(self).__record_key__(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


class _DataclassFields:
    """A record's ``__dataclass_fields__``, made of real ``dataclasses.Field`` objects when first read
    (by dataclasses.fields, replace, asdict or is_dataclass), then kept on the class."""

    def __get__(self, instance: Any, owner: Any) -> dict[str, Any]:
        import dataclasses

        made = {}
        for spec in owner.__record_fields__:
            one: Any = dataclasses.field(
                default=dataclasses.MISSING if spec.default is MISSING else spec.default,
                default_factory=(
                    dataclasses.MISSING if spec.default_factory is MISSING else spec.default_factory
                ),
                compare=spec.compare,
                repr=spec.repr,
            )
            one.name, one.type = spec.name, spec.annotation
            one._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what fields() keeps
            made[spec.name] = one
        type.__setattr__(owner, "__dataclass_fields__", made)
        return made


if TYPE_CHECKING:
    # mypy checks a replace() call's names and types for dataclasses.replace only (its plugin): the
    # records' one is that to it.
    from dataclasses import replace as replace
else:

    def replace(instance, /, **changes):
        """A copy of a record with ``changes`` (dataclasses.replace, without importing dataclasses)."""
        values = {spec.name: getattr(instance, spec.name) for spec in type(instance).__record_fields__}
        values.update(changes)
        return type(instance)(**values)
