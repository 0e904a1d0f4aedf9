// Durations as a person writes them: "850 ms", "2.35 s", "3 min",
// "2 min 30 s", "1 h 5 min", "72 h", "1 d 2 h". Every page of the console
// writes a duration with one of these, so that the same time reads the same
// everywhere: a visit's run time, a timeline's axis, how long something has
// run, when a wait times out.
const units = [
    ["d", 86_400],
    ["h", 3_600],
    ["min", 60],
    ["s", 1],
];
// hoursUpTo: a whole number of days up to this many reads in hours ("24 h",
// "72 h"), as a timeout is written (a Go duration has no day unit); any
// other time of a day or more reads in days and hours ("1 d 2 h").
const hoursUpTo = 3;
// inUnits writes seconds in the largest unit they reach and, with parts 2,
// the unit below it: "2 min 30 s", "1 d 2 h" (a zero second part is left
// out: "3 min"). The smallest unit written is rounded to the nearest, or
// down (a clock that counts up never shows a time not yet reached).
function inUnits(seconds, parts, down) {
    const quantize = down ? Math.floor : Math.round;
    // The largest unit s reaches (seconds for less than one).
    const at = (s) => {
        const i = units.findIndex(([, u]) => s >= u);
        return i < 0 ? units.length - 1 : i;
    };
    let big = at(seconds);
    let small = Math.min(units.length - 1, big + parts - 1);
    let total = quantize(seconds / units[small][1]) * units[small][1];
    // Rounding up may reach the next unit: 59 min 59.6 s is "1 h".
    if (at(total) !== big) {
        big = at(total);
        small = Math.min(units.length - 1, big + parts - 1);
        total = quantize(total / units[small][1]) * units[small][1];
    }
    const [bigName, bigSize] = units[big];
    if (bigName === "d" && total % bigSize === 0 && total / bigSize <= hoursUpTo)
        return `${total / 3_600} h`;
    const first = Math.floor(total / bigSize);
    const rest = Math.round((total - first * bigSize) / units[small][1]);
    return small !== big && rest ? `${first} ${bigName} ${rest} ${units[small][0]}` : `${first} ${bigName}`;
}
// durationText is a measured duration in milliseconds: below a minute to
// the millisecond or a hundredth or tenth of a second ("850 ms", "2.35 s",
// "12.4 s"), else in two units, rounded ("2 min 30 s", "1 h 5 min").
export function durationText(ms) {
    if (!Number.isFinite(ms))
        return "";
    ms = Math.max(0, ms);
    if (ms < 999.5)
        return `${Math.round(ms)} ms`;
    if (ms < 9_995)
        return `${(ms / 1000).toFixed(2)} s`;
    if (ms < 59_950)
        return `${(ms / 1000).toFixed(1)} s`;
    return inUnits(ms / 1000, 2, false);
}
// elapsedText is how long something has run or has left, counted in whole
// seconds down: "<1 s", "42 s", "2 min 5 s", "2 d 23 h".
export function elapsedText(ms) {
    if (!Number.isFinite(ms) || ms < 1000)
        return "<1 s";
    return inUnits(ms / 1000, 2, true);
}
// secondsText is a configured number of seconds (a timeout, a sleep):
// 259200 is "72 h", 90 is "1 min 30 s".
export function secondsText(seconds) {
    if (!Number.isFinite(seconds))
        return "";
    if (seconds < 60)
        return `${Math.max(0, Math.round(seconds * 1000) / 1000)} s`;
    return inUnits(seconds, 2, false);
}
// agoText is a short, rounded "how long": one unit ("5 s", "3 min", "2 h",
// "4 d").
export function agoText(ms) {
    if (!Number.isFinite(ms))
        return "";
    return inUnits(Math.max(0, Math.round(ms / 1000)), 1, false);
}
