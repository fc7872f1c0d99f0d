//! ExecuTorch's `ScalarType` (`schema/scalar_type.fbs`).

macro_rules! scalar_types {
    ($($name:ident = $value:literal, $size:literal, $text:literal;)*) => {
        /// A tensor element type, with the values `scalar_type.fbs` gives them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum ScalarType {
            $($name = $value,)*
        }

        impl ScalarType {
            /// The type with this schema value, `None` for values the schema does not define.
            pub fn from_raw(value: i8) -> Option<ScalarType> {
                match value {
                    $($value => Some(ScalarType::$name),)*
                    _ => None,
                }
            }

            /// Size of one element in bytes (sub-byte types count one byte per stored byte).
            pub fn element_size(self) -> u64 {
                match self {
                    $(ScalarType::$name => $size,)*
                }
            }

            /// The name, as the schema spells it (`FLOAT`, `BFLOAT16`, ...).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ScalarType::$name => $text,)*
                }
            }
        }
    };
}

scalar_types! {
    Byte = 0, 1, "BYTE";
    Char = 1, 1, "CHAR";
    Short = 2, 2, "SHORT";
    Int = 3, 4, "INT";
    Long = 4, 8, "LONG";
    Half = 5, 2, "HALF";
    Float = 6, 4, "FLOAT";
    Double = 7, 8, "DOUBLE";
    Bool = 11, 1, "BOOL";
    QInt8 = 12, 1, "QINT8";
    QUInt8 = 13, 1, "QUINT8";
    QInt32 = 14, 4, "QINT32";
    BFloat16 = 15, 2, "BFLOAT16";
    QUInt4x2 = 16, 1, "QUINT4X2";
    QUInt2x4 = 17, 1, "QUINT2X4";
    Bits16 = 22, 2, "BITS16";
    Float8E5M2 = 23, 1, "FLOAT8E5M2";
    Float8E4M3Fn = 24, 1, "FLOAT8E4M3FN";
    Float8E5M2Fnuz = 25, 1, "FLOAT8E5M2FNUZ";
    Float8E4M3Fnuz = 26, 1, "FLOAT8E4M3FNUZ";
    UInt16 = 27, 2, "UINT16";
    UInt32 = 28, 4, "UINT32";
    UInt64 = 29, 8, "UINT64";
}

impl std::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
