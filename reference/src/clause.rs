//! Stable clause ids: every refusal names the spec statement it enforces.
//!
//! The ids are the keys of `spec-map.toml` at the repository root (a test
//! checks that every id below is there). An id is never reused for another
//! statement; a retired statement keeps its id in the map with a waiver.

macro_rules! clauses {
    ($($variant:ident => $id:literal,)*) => {
        /// A normative statement of the spec that a refusal enforces.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Clause {
            $(#[doc = $id] $variant,)*
        }

        impl Clause {
            /// Every clause, in declaration order.
            pub const ALL: &'static [Clause] = &[$(Clause::$variant,)*];

            /// The stable id, as written in `spec-map.toml`.
            pub fn id(self) -> &'static str {
                match self { $(Clause::$variant => $id,)* }
            }

            /// The clause with this id, if any.
            pub fn from_id(id: &str) -> Option<Clause> {
                match id { $($id => Some(Clause::$variant),)* _ => None }
            }
        }
    };
}

clauses! {
    // Collection model (spec text 001, DIGEST §10).
    UnitsRequired => "collection.meta.units-required",
    UnitParseable => "collection.meta.unit-parseable",
    MolrecVersion => "collection.meta.molrec-version",
    RecordNotEmpty => "collection.record.system-or-trajectory",
    RecordOutsideDeclaration => "collection.schema.record-subset",
    RecordMetaDeclaration => "collection.schema.meta-equal",
    DerivedColumnsAgree => "collection.schema.derived-agree",
    IndexReservedName => "collection.index.reserved-names",
    IndexRowCount => "collection.index.row-count",
    SystemTrajectoryRowCount => "collection.system-trajectory.row-count",
    SystemTrajectoryColumnDisjoint => "collection.system-trajectory.column-disjoint",
    RecordMetaDocument => "collection.record.meta-document",
    RecordParts => "collection.record.parts",
    RecordForceField => "collection.forcefield.no-record-ff",
    // Trajectory and sequence_schema (DIGEST §9).
    StepIncreasing => "trajectory.step.increasing",
    TimeAllOrNone => "trajectory.time.all-or-none",
    StepMetaRequired => "trajectory.meta.required-or-fill",
    FillNullJsonOnly => "trajectory.meta.fill-null-json-only",
    StepMetaCanonicalF64 => "trajectory.meta.canonical-f64",
    ReservedBlockName => "trajectory.schema.reserved-block-names",
    ReservedColumnName => "trajectory.schema.reserved-column-names",
    BlockColumnSetStable => "trajectory.block.column-set-stable",
    StructuralShapeFixed => "trajectory.block.structural-shape-fixed",
    TrajectoryStructuralShapeDeclared => "trajectory.block.structural-shape-declared",
    TrajectoryTargetsDeclared => "trajectory.block.targets-declared",
    AlignedTarget => "trajectory.aligned.target",
    AlignedNoStructuralShape => "trajectory.aligned.no-structural-shape",
    AlignedNoSharedColumn => "trajectory.aligned.no-shared-column",
    AlignedNotSystemName => "trajectory.aligned.not-system-name",
    AlignedRowCount => "trajectory.aligned.row-count",
    // Columns, blocks, frames (DIGEST §§5-6).
    DtypeClosedSet => "column.dtype.closed-set",
    DtypeCanonical => "column.dtype.canonical",
    CanonicalShape => "column.canonical-shape",
    ColumnShape => "column.shape",
    ColumnValues => "column.values",
    StructuralShapeProduct => "block.structural-shape.product",
    ValidityLength => "column.validity.length",
    PrecisionF64Only => "column.precision.f64-only",
    PrecisionRange => "column.precision.range",
    PrecisionPlacement => "column.precision.placement",
    PrecisionOffGrid => "column.precision.off-grid-reported",
    ColumnReservedName => "column.reserved-names",
    FrameReservedBlockName => "frame.reserved-block-names",
    RowReferenceRange => "rowref.in-range",
    RowReferenceTarget => "rowref.target-exists",
    // Typed JSON and meta (DIGEST §7).
    TypedValue => "typed-json.fits-tag",
    MetaTagClosedSet => "meta.tag.closed-set",
    MetaReservedKey => "meta.reserved-key",
    // Box (DIGEST §8).
    BoxShape => "box.shape",
    BoxUndefinedBoundary => "box.undefined-boundary",
    BoxUndefinedCell => "box.undefined-cell",
    BoxCellDefinedOne => "box.trajectory-one-cell-defined",
    // Force field (DIGEST §11).
    ForceFieldDocument => "forcefield.document",
    ForceFieldTable => "forcefield.table",
    ForceFieldUnits => "forcefield.units",
    ForceFieldSource => "forcefield.source",
    ForceFieldStyles => "forcefield.styles",
    ForceFieldStyleTable => "forcefield.style-table",
    ForceFieldTableName => "forcefield.table.name",
    ForceFieldTableEndpoints => "forcefield.table.endpoints",
    // LMDB binding (spec text 000, DIGEST §§1-3).
    MetaRequired => "lmdb.meta.required",
    MetaWellFormed => "lmdb.meta.well-formed",
    Layout => "lmdb.meta.layout",
    LayoutVersion => "lmdb.meta.layout-version",
    IndexCount => "lmdb.index.count",
    IndexPrefixSum => "lmdb.index.prefix-sum",
    IndexTotal => "lmdb.index.total",
    IndexColumns => "lmdb.index.columns",
    IndexHasTrajectory => "lmdb.index.has-trajectory",
    IndexAtomCount => "lmdb.index.n-atoms",
    FrameMissing => "lmdb.frame.missing",
    FrameUndeclaredBlock => "lmdb.frame.undeclared-block",
    FrameUndeclaredMeta => "lmdb.frame.undeclared-meta",
    FrameStep => "lmdb.frame.step",
    FrameFirstRestates => "lmdb.frame.first-restates",
    RecordMetaValue => "lmdb.record.meta-json",
    KeysScheme => "lmdb.keys.scheme",
    FileSingle => "lmdb.file.single",
    FileComplete => "lmdb.file.complete",
    FilePages => "lmdb.file.pages",
    WriterExclusive => "lmdb.file.one-writer",
    // Frame bytes (spec text 000 "Frame bytes", DIGEST §4).
    FrameTooShort => "mrf1.too-short",
    FrameMagic => "mrf1.magic",
    FrameHeaderBounds => "mrf1.header-bounds",
    FramePadding => "mrf1.padding",
    FrameHeaderJson => "mrf1.header-json",
    FrameDtype => "mrf1.dtype",
    FrameOffsetAligned => "mrf1.offset-aligned",
    FrameBufferBounds => "mrf1.buffer-bounds",
    FrameSizeOverflow => "mrf1.size-overflow",
    FrameStringValues => "mrf1.string-values",
    FrameBoolByte => "mrf1.bool-byte",
    FrameValidity => "mrf1.validity",
    // Model JSON (this project's canonical form, docs/canonical-json.md).
    ModelJson => "model-json.well-formed",
}
