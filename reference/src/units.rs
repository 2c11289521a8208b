//! Validation of unit strings against the Python library
//! [pint](https://pint.readthedocs.io): a unit string is valid iff
//! `pint.UnitRegistry().parse_units(unit)` (pint 0.25, default registry)
//! accepts it, with the exceptions listed below.
//!
//! Accepted syntax, as in pint:
//! * names from pint's default registry (canonical names, symbols and aliases:
//!   `angstrom`, `Å`, `bohr`, `a0`, `kcal`, `eV`, `E_h`, `amu`, `Da`, `e`, ...),
//!   case-sensitive, optionally with one prefix (`k`, `kilo`, `µ`, `u`, `Ki`,
//!   ...) and a plural `s` (`angstroms`); also the word `dimensionless`;
//! * products with `*`, `·`, `×` or juxtaposition (`N m`), quotients with `/`
//!   (left-associative), powers with `**` or `^` (right-associative: `m^-1`,
//!   `m**0.5`, `s**(1/2)`), superscripts (`Å²`, `s⁻¹`) and parentheses;
//! * pint's sugar: `m per s`, `m squared`, `cubic m`, `%`, `‰`, `°C`; commas
//!   are dropped;
//! * numbers, as long as the overall scale factor is exactly 1: `1/s` is
//!   valid, `2 m` and `1e3 s` are not (pint's `parse_units` refuses scale
//!   factors; numbers are really only meant as exponents).
//!
//! Deliberate differences from pint:
//! * an empty or blank string is refused (pint reads it as dimensionless);
//! * stray punctuation that pint's tokenizer silently drops (`a.u.`, `m$`) is
//!   refused;
//! * numbers follow `f64`, not Python's exact integers (`2**1024` overflows).
//!
//! pint quirks kept for fidelity: names cancelled out are never looked up
//! (`foo/foo` passes), `m**0` fails unless multiplied by a unit (`m**0*s`),
//! and a parenthesis right after an operand binds to it (`m**2(s)` is
//! `m**(2*s)`, refused), whereas `m**2 (s)` is `m**2*s`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

/// Why a unit string does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    /// The unit string as given.
    pub unit: String,
    /// Human-readable reason it was refused.
    pub reason: String,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unit {:?}: {}", self.unit, self.reason)
    }
}

impl std::error::Error for UnitError {}

/// Checks that `unit` is a unit expression pint's default registry parses.
///
/// See the module documentation for the accepted syntax.
pub fn check_unit(unit: &str) -> Result<(), UnitError> {
    parse(unit).map_err(|reason| UnitError {
        unit: unit.to_string(),
        reason,
    })
}

fn parse(unit: &str) -> Result<(), String> {
    if unit.trim().is_empty() {
        return Err("empty unit string".into());
    }
    let toks = lex(&preprocess(unit))?;
    let mut p = Parser {
        toks: &toks,
        pos: 0,
        depth: 0,
    };
    let v = p.sum()?;
    if let Some(t) = toks.get(p.pos) {
        return Err(format!("unexpected {}", t.describe()));
    }
    if v.scale != 1.0 {
        return Err("numeric scale factors are not allowed in a unit".into());
    }
    // Like pint, only names left after cancellation are looked up (`foo/foo`
    // passes), and a zero power left by `**0` is an error (`m**0`).
    for name in v.names.iter().flat_map(|m| m.keys()) {
        if name != "dimensionless" {
            check_name(name)?;
            if v.zeroed {
                return Err(format!("unit `{name}` raised to the power zero"));
            }
        }
    }
    Ok(())
}

/// Prefixes of pint's default registry, in the order pint tries them.
const PREFIXES: &str = "quecto q ronto r yocto y zepto z atto a femto f pico p nano n micro µ μ u \
    mu mc milli m centi c deci d deca da deka hecto h kilo k mega M giga G tera T peta P exa E \
    zetta Z yotta Y ronna R quetta Q kibi Ki mebi Mi gibi Gi tebi Ti pebi Pi exbi Ei zebi Zi \
    yobi Yi semi demi sesqui";

/// Offset and logarithmic units, which pint refuses to prefix.
const UNPREFIXABLE: &str = "Np celsius dB dBW dBm dBu decade decibel decibelmicrowatt \
    decibelmilliwatt decibelwatt degC degF degRe degreeC degreeF degreeRe degree_Celsius \
    degree_Fahrenheit degree_Reaumur degree_Réaumur fahrenheit neper oct octave reaumur réaumur";

/// Every unit name, symbol and alias of pint 0.25's default registry
/// (`UnitRegistry()._units`), minus spellings pint's preprocessing makes
/// unreachable (`%`, `°C`, ...).
const NAMES: &str = "
A AU A_90 A_US A_it Ah At B BDFT BF BTU Ba Bd Bi Bq Btu Btu_iso Btu_it Btu_th C C_90 Ci Cl D DPI
Da ECC EC_therm E_h Eh F FBM F_90 Fr G G_0 Gal Gb Gy H H_90 Hz J K KPH K_J K_J90 L LMH Ly M MPH Mx
N N_A Ne NeC Nm Np Oe P PPCM PPI PSH Pa Phi_0 R RIU RKM R_K R_K90 R_inf Rd Ry S SPL St Sv T Ta
Td Tj Tt U UK_bbl UK_bushel UK_cup UK_cwt UK_fluid_ounce UK_force_ton UK_gallon UK_gill
UK_horsepower UK_hundredweight UK_pint UK_pk UK_quart UK_ton UK_ton_force US_cwt US_dry_barrel
US_dry_gallon US_dry_pint US_dry_quart US_fluid_dram US_fluid_ounce US_force_ton US_hundredweight
US_international_ampere US_international_ohm US_international_volt US_liquid_cup US_liquid_dram
US_liquid_fifth US_liquid_gallon US_liquid_gill US_liquid_ounce US_liquid_quart US_pint US_shot
US_therm US_ton US_ton_force V VA V_90 V_US V_it W W_90 Wb Wh Xu_Cu Xu_Mo Z_0 a a0 a_0 a_u_action
a_u_current a_u_efg a_u_electric_field a_u_energy a_u_force a_u_intensity a_u_length a_u_mass
a_u_temp a_u_time abA abC abF abH abS abV abampere abcoulomb aberdeen abfarad abhenry abmho abohm
absiemens absorbance_unit abvolt abΩ acre acre_feet acre_foot alpha amp ampere ampere_hour
ampere_turn amu angstrom angstrom_star angular_degree angular_minute angular_second ap_dr ap_lb
ap_oz apothecary_drachm apothecary_dram apothecary_ounce apothecary_pound arc_minute arc_second
arcdeg arcdegree arcmin arcminute arcsec arcsecond are astronomical_unit at atm atm_l atmosphere
atmosphere_liter atomic_mass_constant atomic_unit_of_action atomic_unit_of_current
atomic_unit_of_electric_field atomic_unit_of_electric_field_gradient atomic_unit_of_energy
atomic_unit_of_force atomic_unit_of_intensity atomic_unit_of_length atomic_unit_of_mass
atomic_unit_of_temperature atomic_unit_of_time au avdp_dram avdp_ounce avdp_pound avogadro_constant
avogadro_number avoirdupois_dram avoirdupois_ounce avoirdupois_pound b bag bar barad barie barn
barrel barrie baryd barye baud bbl becquerel beer_barrel beer_bbl big_point biot biot_turn bit
bits_per_pixel blob board_feet board_foot bohr bohr_magneton bohr_radius boiler_horsepower
boltzmann_constant bp bpp bps british_thermal_unit bu buckingham bushel byte c c_0 c_1 c_2
cables_length cal cal_15 cal_it cal_th calorie candela candle carat cc cd celsius centimeter
centipoise centuries century chain characteristic_impedance_of_vacuum cicero circle circular_mil
classical_electron_radius clausius cm_1 cmil common_year conductance_quantum conventional_ampere_90
conventional_coulomb_90 conventional_farad_90 conventional_henry_90 conventional_josephson_constant
conventional_mercury_density conventional_ohm_90 conventional_volt_90
conventional_von_klitzing_constant conventional_water_density conventional_watt_90
cooling_tower_ton coulomb coulomb_constant count counts_per_second cp cps css_pixel ct cu_ft cu_in
cu_yd cubic_centimeter cubic_feet cubic_foot cubic_inch cubic_yard cup curie cwt cycle d dB dBW dBm
dBu dalton darcy day debye decade decibel decibelmicrowatt decibelmilliwatt decibelwatt decimeter
decitex deg degC degF degK degR degRe degree degreeC degreeF degreeK degreeR degreeRe
degree_Celsius degree_Fahrenheit degree_Kelvin degree_Rankine degree_Reaumur degree_Réaumur
delta_celsius delta_degC delta_degF delta_degRe delta_degreeC delta_degreeF delta_degreeRe
delta_degree_Celsius delta_degree_Fahrenheit delta_degree_Reaumur delta_degree_Réaumur
delta_fahrenheit delta_reaumur delta_réaumur den denier dgal didot dirac_constant dot dots_per_inch
dpi dqt dr drachm dram dry_barrel dry_gallon dry_pint dry_quart dtex dwt dyn dyne e eV
electric_constant electrical_horsepower electron_g_factor electron_mass electron_volt electronvolt
elementary_charge entropy_unit enzyme_unit enzymeunit eon eps0 eps_0 epsilon_0 erg esu eu
eulers_number fahrenheit farad faraday faraday_constant fathom feet feetH2O feetH2O_4C feetH2O_60F
feetHg feetHg_0C feetHg_32F feetHg_60F feet_H2O feet_H2O_4C feet_H2O_60F feet_Hg feet_Hg_0C
feet_Hg_32F feet_Hg_60F femtometer fermi fifteen_degree_calorie fifth fine_structure_constant
first_radiation_constant fldr floz fluid_dram fluid_ounce fluidram fm foot foot_H2O foot_H2O_4C
foot_H2O_60F foot_Hg foot_Hg_0C foot_Hg_32F foot_Hg_60F foot_per_second foot_pound footpound
force_gram force_kilogram force_long_ton force_metric_ton force_ounce force_pound force_short_ton
force_t force_ton fortnight fps franklin ft ftH2O ftH2O_4C ftH2O_60F ftHg ftHg_0C ftHg_32F ftHg_60F
ft_H2O ft_H2O_4C ft_H2O_60F ft_Hg ft_Hg_0C ft_Hg_32F ft_Hg_60F ft_lb fur furlong g g0 g_0 g_e g_n
gal galileo gallon gamma gamma_mass gauss gf gi gilbert gill gon gr grad grade gradian grain gram
gram_force gravitational_constant gravity gray gregorian_year h ha hand hartree hartree_energy hbar
hectare henry hertz hogshead horsepower hour hp hr hundredweight hydraulic_horsepower
impedance_of_free_space imperial_barrel imperial_bbl imperial_bu imperial_bushel imperial_cp
imperial_cup imperial_fldr imperial_floz imperial_fluid_drachm imperial_fluid_dram
imperial_fluid_ounce imperial_fluid_scruple imperial_gal imperial_gallon imperial_gi imperial_gill
imperial_minim imperial_peck imperial_pint imperial_pk imperial_pt imperial_qt imperial_quart in
inH2O inH2O_4C inH2O_60F inHg inHg_0C inHg_32F inHg_60F in_H2O in_H2O_4C in_H2O_60F in_Hg in_Hg_0C
in_Hg_32F in_Hg_60F inch inch_H2O inch_H2O_4C inch_H2O_60F inch_Hg inch_Hg_0C inch_Hg_32F
inch_Hg_60F inches inchesH2O inchesH2O_4C inchesH2O_60F inchesHg inchesHg_0C inchesHg_32F
inchesHg_60F inches_H2O inches_H2O_4C inches_H2O_60F inches_Hg inches_Hg_0C inches_Hg_32F
inches_Hg_60F international_british_thermal_unit international_calorie international_feet
international_foot international_inch international_inches international_knot international_mile
international_steam_table_calorie international_yard jig josephson_constant joule julian_year jute
k k_B k_C kat katal kayser kelvin kgf kilogram kilogram_force kilometer kilometer_per_hour
kilometer_per_second kip kip_per_square_inch kn knot knot_international kph kps ksi kt l lambda
lambert langley lb lbf lbt league leap_year li light_year lightyear link liquid_cup liquid_gallon
liquid_gill liquid_pint liquid_quart liter litre lm ln10 long_hundredweight long_ton long_ton_force
lumen lunar_month lux lx ly m mH2O mH2O_4C mH2O_60F mHg mHg_0C mHg_32F mHg_60F m_H2O m_H2O_4C
m_H2O_60F m_Hg m_Hg_0C m_Hg_32F m_Hg_60F m_e m_n m_p m_u magnetic_constant magnetic_flux_quantum
mas maxwell mean_international_ampere mean_international_ohm mean_international_volt
mercury_density_0C mercury_density_32F mercury_density_60F meter meter_H2O meter_H2O_4C
meter_H2O_60F meter_Hg meter_Hg_0C meter_Hg_32F meter_Hg_60F meter_per_second
meter_per_second_squared metre metric_horsepower metric_ton metric_ton_force mho mi microgram
microliter micrometer micromole micron mil mil_length mile mile_per_hour millennia millennium
milliarcsecond milligram min minim minute mol molar molar_gas_constant mole molec molecule month
mph mps mu0 mu_0 mu_B mu_N nautical_mile neper neutron_mass newton
newtonian_constant_of_gravitation nit nmi nuclear_magneton number_english number_meter oct octave
octet oersted ohm ohm_90 ohm_US ohm_it oil_barrel oil_bbl ounce ounce_force oz ozf ozt parsec
particle pascal pc pdl peak_sun_hour peck pel pennyweight percent perch permille pi pica
picture_element pint pixel pixels_per_centimeter pixels_per_inch pk planck_constant planck_current
planck_length planck_mass planck_temperature planck_time point poise pole pond pound pound_force
pound_force_per_square_inch poundal pp ppi ppm printers_dpi printers_pica printers_point
proton_mass psi pt px qt quad quadrillion_Btu quart quarter r_e rad radian rads rankine rd reaumur
reciprocal_centimeter refractive_index_unit refrigeration_ton rem revolution revolutions_per_minute
revolutions_per_second reyn rhe rod roentgen rpm rps rutherford rydberg rydberg_constant réaumur
röntgen s scaled_point scruple sec second second_radiation_constant section sft shake
short_hundredweight short_ton short_ton_force shot sidereal_day sidereal_month sidereal_year
siemens sievert sigma sigma_e slinch slm slpm slug slugette smi sound_pressure_level speed_of_light
sq_deg sq_ft sq_in sq_mi sq_perch sq_pole sq_rod sq_yd sqdeg square_degree square_feet square_foot
square_inch square_inches square_league square_mile square_rod square_survey_mile square_yard sr
standard_atmosphere standard_gravity standard_liter_per_minute statA statC statF statH statT statV
statWb statampere statcoulomb statfarad stathenry statmho statohm stattesla statvolt statweber
statΩ stefan_boltzmann_constant steradian stere stilb stokes stone strain super_feet super_foot
superficial_feet superficial_foot survey_foot survey_link survey_mile sv svedberg sverdrup
synodic_month t tTNT t_force tablespoon tansec tbsp teaspoon technical_atmosphere tesla tex
tex_cicero tex_didot tex_pica tex_point tf th therm thermochemical_british_thermal_unit
thermochemical_calorie thm thomson_cross_section thou tlb toe ton ton_TNT ton_force
ton_of_refrigeration tonne tonne_of_oil_equivalent torr townsend toz tropical_month tropical_year
troy_ounce troy_pound tsp turn u unified_atomic_mass_unit unit_pole us_statute_mile
vacuum_permeability vacuum_permittivity volt volt_ampere von_klitzing_constant water_density_4C
water_density_60F watt watt_hour watthour weber week wien_frequency_displacement_law_constant
wien_u wien_wavelength_displacement_law_constant wien_x x_unit_Cu x_unit_Mo yard yd year yr zeta µ
µ_0 µ_B µ_N Å Å_star ångström ørsted ħ Δcelsius ΔdegC ΔdegF ΔdegRe ΔdegreeC ΔdegreeF ΔdegreeRe
Δdegree_Réaumur Δfahrenheit Δreaumur Δréaumur Φ_0 Ω Ω_90 Ω_US Ω_it α γ ε ε_0 ζ λ μ π ρH2O ρH2O_4C
ρH2O_60F ρHg ρHg_0C ρHg_32F ρHg_60F σ σ_e ϵ ‰ ℎ ℓ Å
";

fn names() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| NAMES.split_whitespace().collect())
}

/// Resolves one name as pint's `get_name` does: the first (suffix, prefix)
/// split whose stem is a unit wins; suffixes are `""` then plural `"s"`.
fn check_name(name: &str) -> Result<(), String> {
    for (stem, plural) in [(Some(name), false), (name.strip_suffix('s'), true)] {
        let Some(stem) = stem else { continue };
        for prefix in std::iter::once("").chain(PREFIXES.split_whitespace()) {
            let Some(base) = stem.strip_prefix(prefix) else {
                continue;
            };
            if (plural && base.chars().count() == 1) || !names().contains(base) {
                continue;
            }
            if !prefix.is_empty() && UNPREFIXABLE.split_whitespace().any(|u| u == base) {
                return Err(format!(
                    "offset or logarithmic unit `{base}` takes no prefix"
                ));
            }
            return Ok(());
        }
    }
    Err(format!("unknown unit name `{name}`"))
}

/// Length of the ASCII identifier (`[_a-zA-Z][_a-zA-Z0-9]*`) starting `s`.
fn ident_len(s: &str) -> usize {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    match s.chars().next() {
        Some(c) if word(c) && !c.is_ascii_digit() => s.find(|c| !word(c)).unwrap_or(s.len()),
        _ => 0,
    }
}

/// One of pint's word rewrites, left to right: `X squared` -> `X**2` when
/// `word` starts with a space, `cubic X` -> `X**3` otherwise.
fn rewrite(s: &str, word: &str, exp: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some(i) = rest.find(word) {
        out.push_str(&rest[..i]);
        rest = &rest[i + word.len()..];
        let n = ident_len(rest);
        if word.starts_with(' ') {
            let mut run = out
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_');
            if run.any(|c| !c.is_ascii_digit()) {
                out.push_str(exp);
                continue;
            }
        } else if n > 0 {
            out.push_str(&rest[..n]);
            out.push_str(exp);
            rest = &rest[n..];
            continue;
        }
        out.push_str(word);
    }
    out + rest
}

/// The ASCII digit for a superscript digit.
fn sup(c: char) -> Option<char> {
    let i = "⁰¹²³⁴⁵⁶⁷⁸⁹".chars().position(|d| d == c)?;
    char::from_digit(u32::try_from(i).ok()?, 10)
}

/// pint's registry preprocessors and `string_preprocessor`, in pint's order.
fn preprocess(s: &str) -> String {
    let s = s
        .replace('×', "*")
        .replace('‰', " permille ")
        .replace('%', " percent ");
    let s = s
        .replace(',', "")
        .replace(" per ", "/")
        .replace('°', "degree");
    let mut s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for (word, exp) in [(" squared", "**2"), (" cubed", "**3"), ("cubic ", "**3")] {
        s = rewrite(&s, word, exp);
    }
    s = rewrite(&rewrite(&s, "square ", "**2"), "sq ", "**2");
    // A space between `[\w.)]` and `[\w(]` is a `*`; superscript exponents
    // `⁻?[⁰-⁹]+(\.[⁰-⁹]*)?` become `**(...)`.
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let (mut out, mut prev, mut it) = (String::new(), ' ', s.chars().peekable());
    while let Some(c) = it.next() {
        let next = it.peek().copied();
        if sup(c).is_none() && !(c == '⁻' && next.and_then(sup).is_some()) {
            let mul = (word(prev) || matches!(prev, '.' | ')'))
                && next.is_some_and(|n| word(n) || n == '(');
            out.push(match c {
                ' ' if mul => '*',
                '⁻' => '-',
                '·' | '⋅' => '*',
                c => c,
            });
            prev = c;
            continue;
        }
        out.push_str("**(");
        out.push(sup(c).unwrap_or('-'));
        let mut dot = false;
        while let Some(&d) = it.peek() {
            match sup(d) {
                Some(digit) => out.push(digit),
                None if d == '.' && !dot => {
                    dot = true;
                    out.push('.');
                }
                None => break,
            }
            it.next();
        }
        out.push(')');
        prev = ')';
    }
    out.replace('^', "**")
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Num(f64),
    Op(&'static str),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Name(n) => format!("name `{n}`"),
            Tok::Num(x) => format!("number `{x}`"),
            Tok::Op(o) => format!("`{o}`"),
        }
    }
}

/// Python-like tokenizer: names, numbers (`1`, `.5`, `2.`, `1e-3`) and operators.
fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut toks, mut rest) = (Vec::new(), s.trim_start());
    while let Some(c) = rest.chars().next() {
        let len = if c.is_ascii_digit() || (c == '.' && digits(&rest[1..]) > 0) {
            let mut end = digits(rest);
            if rest[end..].starts_with('.') {
                end += 1 + digits(&rest[end + 1..]);
            }
            let b = rest.as_bytes();
            if matches!(b.get(end), Some(b'e' | b'E')) {
                let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
                let exp = digits(&rest[end + 1 + sign..]);
                end += if exp > 0 { 1 + sign + exp } else { 0 };
            }
            let x = rest[..end]
                .parse()
                .map_err(|_| format!("bad number `{}`", &rest[..end]))?;
            toks.push(Tok::Num(x));
            end
        } else if c.is_alphanumeric() || c == '_' {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            toks.push(Tok::Name(rest[..end].to_string()));
            end
        } else {
            let ops = ["**", "//", "*", "/", "(", ")", "+", "-"];
            let op = ops.into_iter().find(|op| rest.starts_with(op));
            let op = op.ok_or_else(|| format!("unexpected character `{c}`"))?;
            toks.push(Tok::Op(op));
            op.len()
        };
        rest = rest[len..].trim_start();
    }
    Ok(toks)
}

/// A pint `ParserHelper`: a numeric scale and, once a name is involved, the
/// exponent of each name (`names == None` for a plain number). After `**0`
/// all exponents are zero (`zeroed`) until a product with a unit drops them.
#[derive(Debug, Clone)]
struct Val {
    scale: f64,
    names: Option<BTreeMap<String, f64>>,
    zeroed: bool,
}

impl Val {
    fn num(scale: f64) -> Val {
        Val {
            scale,
            names: None,
            zeroed: false,
        }
    }

    /// `self * other`, or `self / other` if `div`, with pint's semantics:
    /// combining two unit expressions drops zero exponents, numbers only rescale.
    fn combine(self, other: Val, div: bool) -> Result<Val, String> {
        if div && other.scale == 0.0 {
            return Err("division by zero".into());
        }
        let sign = if div { -1.0 } else { 1.0 };
        let scale = if div {
            self.scale / other.scale
        } else {
            self.scale * other.scale
        };
        let live = |v: Val| {
            if v.zeroed {
                BTreeMap::new()
            } else {
                v.names.unwrap_or_default()
            }
        };
        let (names, zeroed) = match (&self.names, &other.names) {
            (Some(_), Some(_)) => {
                let mut a = live(self);
                for (name, e) in live(other) {
                    let x = a.get(&name).copied().unwrap_or(0.0) + sign * e;
                    if x == 0.0 {
                        a.remove(&name);
                    } else {
                        a.insert(name, x);
                    }
                }
                (Some(a), false)
            }
            (None, Some(_)) => {
                let b = other
                    .names
                    .map(|b| b.into_iter().map(|(n, e)| (n, sign * e)).collect());
                (b, other.zeroed)
            }
            _ => (self.names, self.zeroed),
        };
        Ok(Val {
            scale,
            names,
            zeroed,
        })
    }
}

/// Recursive-descent parser with pint's precedences: `**` (right-assoc.) >
/// unary `+`/`-` > `*`, `/`, juxtaposition > binary `+`/`-` (left-assoc.).
struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn eat(&mut self, op: &str) -> bool {
        let hit = matches!(self.toks.get(self.pos), Some(Tok::Op(o)) if *o == op);
        self.pos += usize::from(hit);
        hit
    }

    /// Sums only combine plain numbers (`1-.0`); pint refuses them for units.
    fn sum(&mut self) -> Result<Val, String> {
        let mut v = self.product()?;
        loop {
            let sign = if self.eat("+") {
                1.0
            } else if self.eat("-") {
                -1.0
            } else {
                return Ok(v);
            };
            let r = self.product()?;
            if v.names.is_some() || r.names.is_some() {
                return Err("addition and subtraction are not allowed in a unit".into());
            }
            v.scale += sign * r.scale;
        }
    }

    fn product(&mut self) -> Result<Val, String> {
        let mut v = self.unary()?;
        loop {
            let floor = self.eat("//");
            let div = floor || self.eat("/");
            let next = self.toks.get(self.pos);
            let implicit = matches!(next, Some(Tok::Name(_) | Tok::Num(_) | Tok::Op("(")));
            if !div && !self.eat("*") && !implicit {
                return Ok(v);
            }
            let r = self.unary()?;
            // Python: `number // unit` is a type error, `number // number` floors.
            let plain = v.names.is_none();
            if floor && plain && r.names.is_some() {
                return Err("`//` cannot divide a number by a unit".into());
            }
            v = v.combine(r, div)?;
            if floor && plain {
                v.scale = v.scale.floor();
            }
        }
    }

    fn unary(&mut self) -> Result<Val, String> {
        self.depth += 1;
        if self.depth > 64 {
            return Err("expression nested too deeply".into());
        }
        let v = if self.eat("-") {
            self.unary().map(|v| Val {
                scale: -v.scale,
                ..v
            })
        } else if self.eat("+") {
            self.unary()
        } else {
            self.power()
        };
        self.depth -= 1;
        v
    }

    fn power(&mut self) -> Result<Val, String> {
        let mut v = self.atom()?;
        if !self.eat("**") {
            return Ok(v);
        }
        let e = self.unary()?;
        if e.names.is_some() {
            return Err("exponent must be a number".into());
        }
        if v.scale == 0.0 && e.scale < 0.0 {
            return Err("division by zero".into());
        }
        v.scale = v.scale.powf(e.scale);
        v.zeroed |= v.names.is_some() && e.scale == 0.0;
        v.names
            .iter_mut()
            .flat_map(|m| m.values_mut())
            .for_each(|x| *x *= e.scale);
        Ok(v)
    }

    /// An operand; like pint, a parenthesised group right after an operand
    /// multiplies that operand alone (`m**2(s)` is `m**(2*s)`).
    fn atom(&mut self) -> Result<Val, String> {
        let tok = self.toks.get(self.pos).cloned();
        self.pos += 1;
        let mut v = match tok {
            Some(Tok::Name(n)) => Val {
                names: Some(BTreeMap::from([(n, 1.0)])),
                ..Val::num(1.0)
            },
            Some(Tok::Num(x)) => Val::num(x),
            Some(Tok::Op("(")) => self.group()?,
            Some(t) => return Err(format!("expected a unit, found {}", t.describe())),
            None => return Err("unexpected end of expression".into()),
        };
        while self.eat("(") {
            v = v.combine(self.group()?, false)?;
        }
        Ok(v)
    }

    fn group(&mut self) -> Result<Val, String> {
        let v = self.sum()?;
        if self.eat(")") {
            Ok(v)
        } else {
            Err("unbalanced parenthesis".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_unit;

    #[test]
    fn accepts_pint_units() {
        #[rustfmt::skip]
        let valid = [
            // Length, energy, amount, force, charge.
            "angstrom", "angstroms", "Å", "Å", "ångström", "nm", "nanometer", "bohr", "a0",
            "a_0", "bohr_radius", "m", "meters", "micron", "fermi", "inch", "in", "ft", "feet",
            "kcal/mol", "kJ/mol", "kilocalorie/mole", "eV", "electron_volt", "electronvolts",
            "meV", "hartree", "E_h", "Eh", "hartree_energy", "Ry", "rydberg", "J", "cal",
            "thermochemical_calorie", "erg", "mol", "N", "dyn", "e", "elementary_charge", "C",
            "coulomb", "statcoulomb", "debye",
            // Mass, time, temperature, pressure, volume, angle, dimensionless.
            "amu", "u", "unified_atomic_mass_unit", "dalton", "Da", "g", "kg", "g/mol",
            "electron_mass", "m_e", "fs", "ps", "s", "sec", "min", "h", "hour", "day", "ms",
            "µs", "μs", "us", "atomic_unit_of_time", "kelvin", "K", "degC", "°C", "Pa", "bar",
            "atm", "torr", "L", "l", "liter", "rad", "deg", "degree", "dimensionless", "percent",
            "%", "EV", "GiB",
            // Expressions.
            "kcal/mol/angstrom", "kcal/mol/Å", "eV/Å", "kJ/(mol*nm)", "kJ/(mol nm)",
            "angstrom**2", "angstrom^3", "Å²", "m/s^2", "m/s**2", "s⁻¹", "m^-1", "m**-2",
            "m**0.5", "m^1.5", "s**(1/2)", "N m", "N*m", "kcal mol^-1", "(m/s)**2", "1/s",
            "1/fs", "kJ mol**-1 nm**-2", "m per s", "angstrom squared", "cubic angstrom",
            "  angstrom  ", "m·s", "m**2 (s)",
            // pint quirks.
            "m**0*s", "2/2 m", "foo/foo",
        ];
        for u in valid {
            assert_eq!(check_unit(u), Ok(()), "{u:?} should be valid");
        }
    }

    #[test]
    fn refuses_non_units() {
        #[rustfmt::skip]
        let invalid = [
            "", "   ", "kcal/mool", "foo", "kcal/", "*m", "/m", "m*", "(m", "m)", "()", "m^",
            "m^x", "m**", "Angstrom", "ANGSTROM", "ev", "Torr", "Hartree", "kcal/mol/", "m//",
            "m^^2", "m2", "Ås", "Ks", "mdegC", "atomic_mass_unit", "2 m", "1e3 s", "10*m", "-m",
            "m+m", "m-s", "1/0", "m**s", "m**2(s)", "m**0", "kcal/mol$", "a.u.", "m✓", "Ki",
        ];
        for u in invalid {
            assert!(check_unit(u).is_err(), "{u:?} should be invalid");
        }
    }

    #[test]
    fn error_message_names_the_culprit() {
        let e = check_unit("kcal/mool").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unit \"kcal/mool\": unknown unit name `mool`"
        );
        assert_eq!(e.unit, "kcal/mool");
    }

    #[test]
    fn never_panics() {
        let deep = format!("{}m{}", "(".repeat(5000), ")".repeat(5000));
        let long = "m*".repeat(20_000) + "m";
        for u in [
            &deep,
            &long,
            &"-".repeat(5000),
            &"m**".repeat(999),
            "⁻",
            "m⁻",
            "·",
            "1e",
            ".",
        ] {
            let _ = check_unit(u);
        }
        assert!(check_unit(&deep).is_err());
        assert!(check_unit(&long).is_ok());
    }
}
