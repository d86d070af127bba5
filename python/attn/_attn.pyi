"""Type stubs of the native module (python/_attn.cpp)."""
from typing import Optional, Sequence

import numpy as np

class Error(ValueError): ...

class Argument:
    name: str
    dtype: str
    dims: list[Optional[int]]
    symbols: list[str]
    ceil_divs: list[int]
    at_mosts: list[int]
    in_place: bool

class Model:
    @staticmethod
    def from_file(path: str, threads: int = 0) -> Model: ...
    @staticmethod
    def from_bytes(data: bytes, threads: int = 0) -> Model: ...
    name: str
    threads: int
    entries: list[str]
    device: str
    def signature(self, entry: str) -> tuple[list[Argument], list[Argument]]: ...
    def output_shapes(self, entry: str,
                      inputs: Sequence[np.ndarray]) -> list[list[int]]: ...
    def workspace_bytes(self, entry: str, inputs: Sequence[np.ndarray]) -> int: ...
    def set_workspace(self, pointer: int, bytes: int) -> None: ...
    def check_device(self) -> None: ...
    def output_shapes_of(self, entry: str, shapes: Sequence[Sequence[int]],
                         dtypes: Sequence[str]) -> list[list[int]]: ...
    def run(self, entry: str, inputs: Sequence[np.ndarray],
            outputs: Sequence[np.ndarray]) -> None: ...
    def run_microseconds(self, entry: str, inputs: Sequence[np.ndarray],
                         outputs: Sequence[np.ndarray], repeat: int) -> float: ...
