//! A `list<T>` parameter that costs no guest call when it is empty.
//!
//! The canonical ABI lowers every list by calling the guest's `realloc` for its bytes,
//! zero bytes included: a host → guest call of its own (~480 instructions in wasmtime
//! 50, a third of an empty `score` call, callgrind `benches/profile.rs empty`). Every
//! `score` call passes three lists, and the taint multipliers are empty whenever no
//! preference applies. A `realloc` asked for zero bytes has nothing to allocate: the
//! bindings both SDKs generate (wit-bindgen's Rust runtime and its C generator) answer
//! it with the alignment itself as the pointer and free a list only when its length is
//! non-zero. So an empty list is lowered as exactly that pointer, `(align, 0)`, without
//! the call; a guest reads nothing through it whatever it does with the pointer.
//!
//! This implements wasmtime's `ComponentType`/`Lower` by hand, through the items its
//! derive macros use (`wasmtime::component::__internal`, outside its stability
//! guarantees): the workspace pins wasmtime's version, and a change of those items
//! fails to compile here rather than misbehaving.

use std::mem::MaybeUninit;

use wasmtime::ValRaw;
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

#[cfg(test)]
mod tests {
    use wasmtime::component::{Component, Linker, TypedFunc};
    use wasmtime::{Config, Engine, Store};

    use super::EmptyList;

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
            (func (export "reallocs") (result i32) (global.get $calls)))
          (core instance $i (instantiate $m))
          (func (export "pointer") (param "l" (list u64)) (result u32)
            (canon lift (core func $i "pointer") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc"))))
          (func (export "inner") (param "l" (list (list u64))) (result u32)
            (canon lift (core func $i "inner") (memory (core memory $i "memory"))
              (realloc (core func $i "realloc"))))
          (func (export "reallocs") (result u32)
            (canon lift (core func $i "reallocs"))))
    "#;

    #[test]
    fn an_empty_list_is_lowered_as_its_alignment_without_calling_realloc() {
        let mut config = Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, wat::parse_str(COUNTING).unwrap()).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine).instantiate(&mut store, &component).unwrap();
        let counted: TypedFunc<(), (u32,)> = instance.get_typed_func(&mut store, "reallocs").unwrap();
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
}
