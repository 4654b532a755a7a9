//! What the checks gathered in a run, one value per type: each check
//! keeps its own type (its saved history, what it read), so that adding a
//! check adds a type, not a field here.

use std::any::Any;

/// The run's evidence: at most one value of each type.
#[derive(Default)]
pub struct Evidence {
    items: Vec<Box<dyn Any>>,
}

impl Evidence {
    /// Keep `value`, replacing one of the same type.
    pub fn insert<T: Any>(&mut self, value: T) {
        self.items.retain(|i| !i.is::<T>());
        self.items.push(Box::new(value));
    }

    pub fn get<T: Any>(&self) -> Option<&T> {
        self.items.iter().find_map(|i| i.downcast_ref::<T>())
    }

    pub fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.items.iter_mut().find_map(|i| i.downcast_mut::<T>())
    }
}

impl std::fmt::Debug for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Evidence({} items)", self.items.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_type() {
        let mut e = Evidence::default();
        assert_eq!(e.get::<u32>(), None);
        e.insert(1u32);
        e.insert("x".to_string());
        e.insert(2u32);
        assert_eq!(e.get::<u32>(), Some(&2));
        assert_eq!(e.get::<String>().map(String::as_str), Some("x"));
        *e.get_mut::<u32>().unwrap() += 1;
        assert_eq!(e.get::<u32>(), Some(&3));
    }
}
