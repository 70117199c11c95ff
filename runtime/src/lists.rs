//! How the candidates' lists are lowered into a guest.
//!
//! **An empty list costs no guest call.** The canonical ABI lowers every list by calling
//! the guest's `realloc` for its bytes, zero bytes included: a host → guest call of its
//! own (a large share of an empty `score` call: callgrind, `benches/profile.rs empty`;
//! docs/benchmarks-history.md, "an empty call's instructions"). Every `score` call passes
//! three lists, and the taint multipliers are empty whenever no preference applies. A
//! `realloc` asked for zero bytes has nothing to allocate: the bindings both SDKs generate
//! (wit-bindgen's Rust runtime and its C generator) answer it with the alignment itself as
//! the pointer and free a list only when its length is non-zero. So an empty list is
//! lowered as exactly that pointer, `(align, 0)`, without the call; a guest reads nothing
//! through it whatever it does with the pointer.
//!
//! **The packed columns are one list gathered from columns that lie apart.** The WIT
//! record carries the declared u32 columns one after another in one `list<u32>`; the
//! host's columns are separate buffers (the caller's own, read in place, when every slot
//! is a candidate). [`PackedColumns`] asks the guest for the whole list once and copies
//! each column into its place: the one copy into guest memory, with no packed copy on the
//! host first.
//!
//! Both implement wasmtime's `ComponentType`/`Lower` by hand, through the items its
//! derive macros use (`wasmtime::component::__internal`, outside its stability
//! guarantees): the workspace pins wasmtime's version, and a change of those items
//! fails to compile here rather than misbehaving.

use std::mem::MaybeUninit;

use wasmtime::ValRaw;

use crate::selection::ColumnBuffers;
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext};
use wasmtime::component::{ComponentType, Lower};

/// A borrowed list lowered like `[T]`, but without calling the guest's `realloc` when
/// empty (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EmptyList<'a, T>(pub &'a [T]);

// SAFETY: every item is `[T]`'s own: the lowered form, ABI and type check are the same
// as those of the list type whose lowering this one delegates to when non-empty.
unsafe impl<T: ComponentType> ComponentType for EmptyList<'_, T> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = <[T] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[T] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: a non-empty list is lowered by `[T]`'s own implementation; an empty one writes
// the two values of a pointer pair (`[ValRaw; 2]`, `[T]`'s lowered form) or the two
// 32-bit words of one in memory, both the canonical ABI's layout of a list.
unsafe impl<T: Lower> Lower for EmptyList<'_, T> {
    fn linear_lower_to_flat<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        if !self.0.is_empty() {
            return self.0.linear_lower_to_flat(cx, ty, dst);
        }
        // `[ValRaw; 2]`: pointer, then length, each stored as a 64-bit integer as
        // wasmtime's own lowering does.
        dst.write([ValRaw::i64(i64::from(T::ALIGN32)), ValRaw::i64(0)]);
        Ok(())
    }

    fn linear_lower_to_memory<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        if !self.0.is_empty() {
            return self.0.linear_lower_to_memory(cx, ty, offset);
        }
        *cx.get::<4>(offset) = T::ALIGN32.to_le_bytes();
        *cx.get::<4>(offset + 4) = 0u32.to_le_bytes();
        Ok(())
    }
}

/// The declared u32 columns of a call, lowered as the one `list<u32>` of the WIT record
/// (each column after the other, [`ColumnBuffers::packed_columns`]), without a guest call
/// when there are none (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedColumns<'a>(pub &'a ColumnBuffers);

impl PackedColumns<'_> {
    /// Asks the guest for the whole list once and copies every column into its place:
    /// the list's (pointer, length).
    fn store<U>(&self, cx: &mut LowerContext<'_, U>) -> wasmtime::Result<(usize, usize)> {
        let len: usize = self.0.packed_columns().map(<[u32]>::len).sum();
        if len == 0 {
            return Ok((u32::ALIGN32 as usize, 0));
        }
        let size = len
            .checked_mul(u32::SIZE32)
            .ok_or_else(|| wasmtime::format_err!("size overflow copying the candidates' columns"))?;
        // `realloc` checks that the guest's answer is aligned and that `size` bytes from
        // it lie inside its memory.
        let list = cx.realloc(0, 0, u32::ALIGN32, size)?;
        // One view of the guest's memory for every column (each store through wasmtime
        // looks the memory up again); little-endian words, as the canonical ABI stores
        // them, which compiles to a copy.
        let (mut words, _) = cx.as_slice_mut()[list..][..size].as_chunks_mut::<4>();
        for column in self.0.packed_columns() {
            let (into, rest) = words.split_at_mut(column.len());
            for (word, value) in into.iter_mut().zip(column) {
                *word = value.to_le_bytes();
            }
            words = rest;
        }
        Ok((list, len))
    }
}

// SAFETY: the lowered form, ABI and type check are `[u32]`'s own, the list this type is
// lowered as.
unsafe impl ComponentType for PackedColumns<'_> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = <[u32] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u32] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: the list is allocated by the guest's `realloc` (wasmtime checks that the range
// lies in its memory) and filled through a bounds-checked slice of that range; the pointer
// pair is written as `[u32]`'s lowering writes it, flat (two 64-bit values) or in memory
// (two 32-bit words).
unsafe impl Lower for PackedColumns<'_> {
    fn linear_lower_to_flat<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        _ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        let (list, len) = self.store(cx)?;
        dst.write([ValRaw::i64(list as i64), ValRaw::i64(len as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let (list, len) = self.store(cx)?;
        *cx.get::<4>(offset) = u32::try_from(list)?.to_le_bytes();
        *cx.get::<4>(offset + 4) = u32::try_from(len)?.to_le_bytes();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::component::{Component, Instance, Linker, TypedFunc};
    use wasmtime::{Config, Engine, Store};

    use switchyard_guest_sdk::{Column, InputGroups, Pool, RequestFacts};

    use super::{EmptyList, PackedColumns};
    use crate::selection::{
        ColumnBuffers, RequestOptions, SelectionRequest, Worker, WorkerInputs, WorkerTable,
    };

    /// A component whose `realloc` counts its calls and hands out address 64; `pointer`
    /// answers the pointer of the list it was given, `reallocs` the calls so far.
    const COUNTING: &str = r#"
        (component
          (core module $m
            (memory (export "memory") 1)
            (global $calls (mut i32) (i32.const 0))
            (func (export "realloc") (param i32 i32 i32 i32) (result i32)
              (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
              (i32.const 64))
            (func (export "pointer") (param i32 i32) (result i32) (local.get 0))
            (func (export "inner") (param i32 i32) (result i32) (i32.load (local.get 0)))
            (func (export "reallocs") (result i32) (global.get $calls))
            (func (export "at") (param i32 i32 i32) (result i32)
              (i32.load (i32.add (local.get 0) (i32.shl (local.get 2) (i32.const 2)))))
            (func (export "len") (param i32 i32) (result i32) (local.get 1)))
          (core instance $i (instantiate $m))
          (func (export "pointer") (param "l" (list u64)) (result u32)
            (canon lift (core func $i "pointer") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc"))))
          (func (export "inner") (param "l" (list (list u64))) (result u32)
            (canon lift (core func $i "inner") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc"))))
          (func (export "reallocs") (result u32)
            (canon lift (core func $i "reallocs")))
          (func (export "at") (param "l" (list u32)) (param "i" u32) (result u32)
            (canon lift (core func $i "at") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc"))))
          (func (export "len") (param "l" (list u32)) (result u32)
            (canon lift (core func $i "len") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc")))))
    "#;

    /// An instance of `COUNTING`, and its `reallocs` function.
    fn counting() -> (Store<()>, Instance, TypedFunc<(), (u32,)>) {
        let mut config = Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, wat::parse_str(COUNTING).unwrap()).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine).instantiate(&mut store, &component).unwrap();
        let counted = instance.get_typed_func(&mut store, "reallocs").unwrap();
        (store, instance, counted)
    }

    #[test]
    fn an_empty_list_is_lowered_as_its_alignment_without_calling_realloc() {
        let (mut store, instance, counted) = counting();
        let wrapped: TypedFunc<(EmptyList<'_, u64>,), (u32,)> =
            instance.get_typed_func(&mut store, "pointer").unwrap();
        let plain: TypedFunc<(&[u64],), (u32,)> = instance.get_typed_func(&mut store, "pointer").unwrap();

        // Empty: the pointer is the alignment of u64, and the guest was not called.
        assert_eq!(wrapped.call(&mut store, (EmptyList(&[]),)).unwrap().0, 8);
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 0);
        // Non-empty: lowered as wasmtime lowers a list, through the guest's realloc.
        assert_eq!(wrapped.call(&mut store, (EmptyList(&[1, 2]),)).unwrap().0, 64);
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 1);
        // What it saves: wasmtime's own lowering calls realloc for an empty list too.
        assert_eq!(plain.call(&mut store, (&[][..],)).unwrap().0, 64);
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 2);
        // In memory (an element of an outer list): the same pointer pair, and only the
        // outer list's realloc.
        let nested: TypedFunc<(&[EmptyList<'_, u64>],), (u32,)> =
            instance.get_typed_func(&mut store, "inner").unwrap();
        assert_eq!(nested.call(&mut store, (&[EmptyList(&[])][..],)).unwrap().0, 8);
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 3);
    }

    #[test]
    fn packed_columns_are_one_list_of_the_declared_columns_in_wire_order_from_one_realloc() {
        let (mut store, instance, counted) = counting();
        let at: TypedFunc<(PackedColumns<'_>, u32), (u32,)> =
            instance.get_typed_func(&mut store, "at").unwrap();
        let len: TypedFunc<(PackedColumns<'_>,), (u32,)> =
            instance.get_typed_func(&mut store, "len").unwrap();

        // Every slot a candidate: the request's own columns, each in its own buffer, one
        // of an undeclared group among them.
        let table = WorkerTable::new(vec![Worker::new(3, 1, 0, None), Worker::new(8, 2, 0, None)]).unwrap();
        let facts = RequestFacts {
            prompt_tokens: 64,
            block_size: 16,
            request_blocks: 4,
            expected_output_tokens: None,
            pinned: None,
            pool: Pool::Aggregated,
            seed: 1,
        };
        let inputs = WorkerInputs::new(vec![3, 8, 8])
            .with(Column::DpRank, vec![0, 0, 1])
            .with(Column::ActivePrefillTokens, vec![10, 11, 12])
            .with(Column::DecodeBlocks, vec![20, 21, 22])
            .with(Column::ActiveRequests, vec![30, 31, 32])
            .with(Column::CachedTokens, vec![7, 7, 7]);
        let request = SelectionRequest::new(&table, facts, RequestOptions::default(), inputs).unwrap();
        let mut view = ColumnBuffers::default();
        view.materialise(&table, &request, InputGroups::LOAD);
        let wire = [0, 0, 1, 10, 11, 12, 20, 21, 22, 30, 31, 32];
        assert_eq!(len.call(&mut store, (PackedColumns(&view),)).unwrap().0, 12);
        for (i, expected) in wire.into_iter().enumerate() {
            assert_eq!(
                at.call(&mut store, (PackedColumns(&view), i as u32)).unwrap().0,
                expected,
                "element {i}"
            );
        }
        // One realloc for each call's whole list (the `len` call and the 12 `at` calls).
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 13);
        // No candidate: no call into the guest.
        let allowed = RequestOptions { allowed_workers: Some(vec![99]), ..Default::default() };
        let none = SelectionRequest::new(&table, facts, allowed, WorkerInputs::default()).unwrap();
        let mut empty = ColumnBuffers::default();
        empty.materialise(&table, &none, InputGroups::LOAD);
        assert_eq!(len.call(&mut store, (PackedColumns(&empty),)).unwrap().0, 0);
        assert_eq!(counted.call(&mut store, ()).unwrap().0, 13);
    }
}
