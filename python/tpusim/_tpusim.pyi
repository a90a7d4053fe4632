# Stubs of the native module built from crates/python (checked by mypy.stubtest).
from typing import List, Optional, Tuple, Union

import numpy as np

__all__ = [
    "__version__",
    "analyze_json",
    "run",
    "trace_views",
    "profile_json",
    "chips_json",
    "chip_json",
    "TpusimError",
    "ParseError",
    "VerifyError",
    "ChipError",
    "ArgumentError",
    "TopologyError",
    "UnsupportedError",
    "LimitError",
    "InternalError",
]

__version__: str

def analyze_json(
    text: str,
    name: str,
    chip_id: Optional[str] = None,
    chip_file: Optional[str] = None,
    topology: Optional[str] = None,
    slices: int = 1,
    network: Optional[str] = None,
    device_order: Optional[str] = None,
    as_given: bool = False,
    collective_matmul: bool = False,
    mesh: Optional[List[int]] = None,
    propagation: Optional[str] = None,
) -> str: ...
def trace_views(
    text: str,
    name: str,
    dir: str,
    chip_id: Optional[str] = None,
    chip_file: Optional[str] = None,
    topology: Optional[str] = None,
    slices: int = 1,
    network: Optional[str] = None,
    device_order: Optional[str] = None,
    as_given: bool = False,
    collective_matmul: bool = False,
    force: bool = False,
    timestamp: bool = False,
    mesh: Optional[List[int]] = None,
    propagation: Optional[str] = None,
) -> Tuple[str, str, str]: ...
def profile_json(
    path: str, hlo: Optional[Tuple[str, str]] = None, chip_id: Optional[str] = None
) -> str: ...
def run(
    text: str,
    name: str,
    arrays: List[np.ndarray],
    dtypes: List[str],
    max_memory: Union[int, str, None] = None,
    output_sharding: Union[str, Tuple[str, str], None] = None,
    max_steps: Optional[int] = None,
    timeout: Optional[float] = None,
    propagation: Optional[str] = None,
) -> List[Tuple[np.ndarray, str]]: ...
def chips_json() -> str: ...
def chip_json(chip_id: Optional[str] = None, chip_file: Optional[str] = None) -> str: ...

class TpusimError(Exception): ...
class ParseError(TpusimError): ...
class VerifyError(TpusimError): ...
class ChipError(TpusimError): ...
class ArgumentError(TpusimError): ...
class TopologyError(TpusimError): ...
class UnsupportedError(TpusimError): ...
class LimitError(TpusimError): ...
class InternalError(TpusimError): ...
