//! `vkdelegate inspect`: a summary of a VGF file (inputs, outputs, segments, constants), every
//! resource and constant with `--verbose`, or the library's JSON with `--json`.

use std::path::Path;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `vkdelegate inspect MODEL.vgf [--json] [--verbose]`.
#[cfg(feature = "vgf")]
pub fn run(model: &Path, json: bool, verbose: bool) -> Result {
    use vkdelegate::vgf::{Vgf, inspect_json};
    let bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let vgf = Vgf::decode(&bytes).map_err(|e| format!("{}: {e}", model.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&inspect_json(&vgf))?);
        return Ok(());
    }
    print!("{}", text::summary(model, bytes.len(), &vgf));
    if verbose {
        print!("{}", text::details(&vgf));
    } else {
        println!("(--verbose lists every resource and constant)");
    }
    Ok(())
}

#[cfg(not(feature = "vgf"))]
pub fn run(model: &Path, _json: bool, _verbose: bool) -> Result {
    Err(format!(
        "{}: inspecting VGF files needs the `vgf` feature, which this build lacks",
        model.display()
    )
    .into())
}

/// The text layout, as strings so that it can be tested without a terminal.
#[cfg(feature = "vgf")]
pub(crate) mod text {
    use std::fmt::Write as _;
    use std::path::Path;

    use vkdelegate::vgf::format::{Category, Resource, Segment, Vgf};
    use vkdelegate::vgf::inspect::{IoDecl, descriptor_type_name, format_name};
    use vkdelegate::vgf::inspect::{model_inputs, model_outputs};

    /// Header, inputs, outputs, modules, segments, resource counts, constant totals.
    pub fn summary(model: &Path, file_bytes: usize, vgf: &Vgf<'_>) -> String {
        let v = vgf.header.version;
        let mut s = format!(
            "{}: VGF {}.{}.{}, {} bytes\n",
            model.display(),
            v.major,
            v.minor,
            v.patch,
            file_bytes
        );
        io_section(&mut s, "inputs", &model_inputs(vgf));
        io_section(&mut s, "outputs", &model_outputs(vgf));
        segments_section(&mut s, vgf);
        resources_line(&mut s, &vgf.resources);
        constants_line(&mut s, vgf);
        s
    }

    fn io_section(s: &mut String, title: &str, list: &[IoDecl]) {
        let _ = writeln!(s, "{title} ({}):", list.len());
        for io in list {
            let _ = writeln!(
                s,
                "  [{}] {:<16} {:<5} {:?}  (resource {})",
                io.index,
                io.name,
                io.dtype_name(),
                io.shape,
                io.mrt_index
            );
        }
    }

    fn segments_section(s: &mut String, vgf: &Vgf<'_>) {
        let _ = writeln!(s, "segments ({}):", vgf.sequence.segments.len());
        for (i, seg) in vgf.sequence.segments.iter().enumerate() {
            let _ = writeln!(s, "  [{i}] {}", segment_line(vgf, seg));
        }
    }

    fn segment_line(vgf: &Vgf<'_>, seg: &Segment<'_>) -> String {
        let module = vgf.modules.get(seg.module_index as usize);
        let module = match module {
            Some(m) => format!(
                "module {} '{}' (entry {}, {})",
                seg.module_index,
                m.name,
                m.entry_point,
                m.spirv.map_or("no code".to_string(), |c| format!(
                    "{} SPIR-V words",
                    c.word_count()
                ))
            ),
            None => format!("module {} (absent)", seg.module_index),
        };
        let bindings: usize = seg.descriptor_sets.iter().map(|d| d.bindings.len()).sum();
        let mut line = format!(
            "{} '{}': {module}; {} input(s), {} output(s), {} constant(s), {} descriptor set(s) \
             with {bindings} binding(s)",
            seg.kind.as_str(),
            seg.name,
            seg.inputs.len(),
            seg.outputs.len(),
            seg.constants.len(),
            seg.descriptor_sets.len(),
        );
        if let Some(d) = seg.dispatch_shape.filter(|d| d.iter().any(|&n| n > 0)) {
            let _ = write!(line, ", dispatch {d:?}");
        }
        line
    }

    fn resources_line(s: &mut String, resources: &[Resource]) {
        let count = |c: Category| resources.iter().filter(|r| r.category == c).count();
        let _ = writeln!(
            s,
            "resources: {} ({} input, {} output, {} intermediate, {} constant)",
            resources.len(),
            count(Category::Input),
            count(Category::Output),
            count(Category::Intermediate),
            count(Category::Constant),
        );
    }

    fn constants_line(s: &mut String, vgf: &Vgf<'_>) {
        let total: usize = vgf.constants.iter().map(|c| c.data.len()).sum();
        let sparse = vgf
            .constants
            .iter()
            .filter(|c| c.sparsity_dimension >= 0)
            .count();
        let _ = write!(
            s,
            "constants: {}, {total} bytes ({})",
            vgf.constants.len(),
            human_bytes(total)
        );
        if sparse > 0 {
            let _ = write!(s, ", {sparse} sparse");
        }
        let _ = writeln!(s, ", layout {:?}", vgf.constants_layout);
    }

    /// `1.5 MiB`, `12.0 KiB`, `512 B`.
    pub fn human_bytes(n: usize) -> String {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if n < 1024 {
            return format!("{n} B");
        }
        let mut v = n as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        format!("{v:.1} {}", UNITS[unit])
    }

    /// Every module, resource and constant, one line each.
    pub fn details(vgf: &Vgf<'_>) -> String {
        let mut s = format!("modules ({}):\n", vgf.modules.len());
        for (i, m) in vgf.modules.iter().enumerate() {
            let code = m.spirv.map_or("no code".to_string(), |c| {
                format!("{} SPIR-V words", c.word_count())
            });
            let _ = writeln!(
                s,
                "  [{i}] {} '{}' entry {}, {code}",
                m.kind.as_str(),
                m.name,
                m.entry_point
            );
        }
        let _ = writeln!(s, "resources ({}):", vgf.resources.len());
        for r in &vgf.resources {
            let _ = writeln!(s, "  [{}] {}", r.index, resource_line(r));
        }
        let _ = writeln!(s, "constants ({}):", vgf.constants.len());
        for (i, c) in vgf.constants.iter().enumerate() {
            let sparsity = if c.sparsity_dimension < 0 {
                "dense".to_string()
            } else {
                format!("sparse in dimension {}", c.sparsity_dimension)
            };
            let _ = writeln!(
                s,
                "  [{i}] resource {}, {} bytes, {sparsity}",
                c.mrt_index,
                c.data.len()
            );
        }
        s
    }

    fn resource_line(r: &Resource) -> String {
        let mut line = format!(
            "{:<12} {} {:?}",
            r.category.as_str(),
            format_name(r.vk_format),
            r.shape
        );
        if !r.strides.is_empty() {
            let _ = write!(line, " strides {:?}", r.strides);
        }
        if r.vk_descriptor_type.is_some() {
            let _ = write!(line, " {}", descriptor_type_name(r.vk_descriptor_type));
        }
        if let Some(g) = r.alias_group {
            let _ = write!(line, " alias group {g}");
        }
        if r.sampler.is_some() {
            line.push_str(" sampled");
        }
        line
    }

    #[cfg(test)]
    mod tests {
        use super::human_bytes;

        #[test]
        fn byte_sizes_read_well() {
            assert_eq!(human_bytes(512), "512 B");
            assert_eq!(human_bytes(12 * 1024), "12.0 KiB");
            assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        }
    }
}
