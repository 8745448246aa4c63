"""The ACT SHAVE kernel ABI: MemRefData, element types and dimension orders."""

from vpuc.abi.dtypes import (DATA_TYPES, NAMED_ORDERS, DataType, DataTypeInfo,
                             compact_strides_bits, data_type, data_type_of, dims_order_code,
                             dims_order_permutation, identity_order, memory_dims)
from vpuc.abi.memref import (MEMREF_FIELDS, MEMREF_FORMAT, MEMREF_OFFSETS, MEMREF_SIZE,
                             MemRefData, pack_dims, pack_strides, unpack_dims, unpack_strides)

__all__ = [
    "DATA_TYPES", "NAMED_ORDERS", "DataType", "DataTypeInfo", "compact_strides_bits",
    "data_type", "data_type_of", "dims_order_code", "dims_order_permutation", "identity_order",
    "memory_dims", "MEMREF_FIELDS", "MEMREF_FORMAT", "MEMREF_OFFSETS", "MEMREF_SIZE",
    "MemRefData", "pack_dims", "pack_strides", "unpack_dims", "unpack_strides",
]
